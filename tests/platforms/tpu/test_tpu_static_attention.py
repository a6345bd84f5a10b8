"""The static-shape attention of pagoda-tpu and its step padding through core's step
builder, in plain torch on the host (test_tpu_xla.py runs them on XLA's CPU device)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("pagoda_tpu", reason="pagoda-tpu is not installed")

from pagoda.engine.scheduler_output import ScheduledRequest  # noqa: E402
from pagoda.testing import (  # noqa: E402
    ATTENTION_CASES,
    DTYPES,
    check_attention_backend,
    dtype_name,
)
from pagoda.worker.step_inputs import build_step_inputs  # noqa: E402
from pagoda_tpu import paged_attention as static  # noqa: E402
from pagoda_tpu.attention import XlaAttentionBackend  # noqa: E402
from pagoda_tpu.shapes import StaticShapeConfig, StepShapes  # noqa: E402


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_xla_backend_matches_reference_on_the_host(dtype: torch.dtype) -> None:
    report = check_attention_backend(XlaAttentionBackend, dtype, seed=5)
    report.raise_for_failures()
    assert len(report.checked) == len(ATTENTION_CASES)


def test_xla_backend_in_token_chunks_matches_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(static, "MAX_GATHER_ELEMENTS", 1 << 16)  # ~10 tokens per chunk
    report = check_attention_backend(XlaAttentionBackend, torch.float32, seed=4)
    report.raise_for_failures()
    assert len(report.checked) == len(ATTENTION_CASES)


def test_token_positions_of_a_mixed_batch_with_padding() -> None:
    # A prefill of 3, a sequence with no query rows, a decode at position 6, 2 padding tokens.
    starts = torch.tensor([0, 3, 3, 4], dtype=torch.int32)
    lens = torch.tensor([3, 5, 7], dtype=torch.int32)
    seq, pos = static.token_positions(6, starts, lens)
    assert seq.tolist() == [0, 0, 0, 2, 2, 2]
    assert pos.tolist() == [0, 1, 2, 6, 0, 0]


def test_padding_tokens_write_only_the_padding_block() -> None:
    spec_shape = (2, 4, 2, 1, 3)  # 3 blocks for sequences + the padding block
    cache = torch.full(spec_shape, 7.0)
    key = torch.arange(9.0).view(3, 1, 3)
    slots = torch.tensor([0, -1, 5])
    static.write_kv(key, -key, cache, slots)
    flat = cache.view(2, 8, 1, 3)
    assert torch.equal(flat[0, 0], key[0]) and torch.equal(flat[1, 5], -key[2])
    assert torch.equal(flat[0, 6], key[1])  # the padding block's first slot
    untouched = [s for s in range(8) if s not in (0, 5, 6)]
    assert bool((flat[:, untouched] == 7.0).all())


def _item(request_id: str, computed: int, tokens: list[int], blocks: list[int]) -> ScheduledRequest:
    return ScheduledRequest(request_id, computed, tokens, blocks, sample=True)


def test_pad_step_pads_every_dimension_to_its_bucket() -> None:
    shapes = StepShapes(StaticShapeConfig(min_tokens=8, min_seqs=4, min_blocks=4),
                        max_tokens=64, max_seqs=16, max_blocks=32)
    step = build_step_inputs([_item("a", 0, [5, 6, 7], [3]), _item("b", 5, [9], [1, 2])], 4,
                             torch.device("cpu"), shapes)
    meta = step.metadata
    assert step.input_ids.tolist() == [5, 6, 7, 9, 0, 0, 0, 0]
    assert step.positions.tolist() == [0, 1, 2, 5, 0, 0, 0, 0]
    assert meta.slot_mapping.tolist() == [12, 13, 14, 9, -1, -1, -1, -1]
    assert meta.block_tables.tolist() == [[3, 0, 0, 0], [1, 2, 0, 0], [0] * 4, [0] * 4]
    assert meta.query_start_loc.tolist() == meta.query_start_loc_cpu == [0, 3, 4, 4, 4]
    assert meta.seq_lens.tolist() == meta.seq_lens_cpu == [3, 6, 0, 0]
    assert (meta.num_tokens, meta.max_query_len, meta.max_seq_len) == (8, 3, 6)
    assert step.last_token_index == [2, 3]
    assert (step.shape.num_tokens, step.shape.num_seqs, step.shape.max_blocks) == (8, 4, 4)
    assert shapes.rows(2) == 8  # logits of 2 rows are gathered as 8


def test_padded_steps_of_one_bucket_have_equal_shapes() -> None:
    shapes = StepShapes(StaticShapeConfig(), max_tokens=2048, max_seqs=256, max_blocks=100)
    steps = [
        build_step_inputs([_item("a", 0, list(range(3, 13)), [0])], 16, torch.device("cpu"),
                          shapes),
        build_step_inputs([_item("a", 10, [4], [0]), _item("b", 0, [5] * 9, [1, 2])], 16,
                          torch.device("cpu"), shapes),
    ]
    for first, second in zip(steps[0].__dict__.values(), steps[1].__dict__.values()):
        if isinstance(first, torch.Tensor):
            assert first.shape == second.shape
    metas = [s.metadata for s in steps]
    assert [tuple(m.block_tables.shape) for m in metas] == [(8, 8), (8, 8)]
    assert [m.slot_mapping.shape[0] for m in metas] == [16, 16]
