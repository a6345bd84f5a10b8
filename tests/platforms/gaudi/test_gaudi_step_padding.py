"""Gaudi's buckets shape the engine's steps: `BucketPadding`'s choices, and a real engine on
the CPU whose platform pads its steps with them (Gaudi's step-padding hook, the host's
kernels): every step runs at a bucket's shape, and the greedy tokens are those of the same
engine without padding."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

pytest.importorskip("pagoda_gaudi", reason="pagoda-gaudi is not installed")

from pagoda import LLM, SamplingParams  # noqa: E402
from pagoda.platforms.step_padding import StepShape  # noqa: E402
from pagoda.worker import model_runner  # noqa: E402
from pagoda_cpu.platform import CpuPlatform  # noqa: E402
from pagoda_gaudi.bucketing import (  # noqa: E402
    BucketConfig,
    BucketConfigError,
    BucketPadding,
    BucketRange,
)
from tests.engine.tiny_models import VOCAB, make_checkpoint, tiny_configs  # noqa: E402

CONFIG = BucketConfig(batch_size=BucketRange(1, 4, 8), tokens=BucketRange(16, 16, 64))
BATCH_BUCKETS, TOKEN_BUCKETS = [1, 2, 4, 8], [16, 32, 64]


def test_bucket_lists() -> None:
    assert CONFIG.buckets(CONFIG.batch_size) == BATCH_BUCKETS
    assert CONFIG.buckets(CONFIG.tokens) == TOKEN_BUCKETS


def test_mixed_steps_pad_tokens_and_decode_steps_pad_like_their_sequences() -> None:
    padding = BucketPadding(CONFIG, StepShape(64, 8, 10))
    assert padding.pad(StepShape(21, 3, 3)) == StepShape(32, 4, 4)
    assert padding.pad(StepShape(3, 3, 5)) == StepShape(4, 4, 8)  # decodes only
    assert padding.pad(StepShape(5, 5, 9)) == StepShape(8, 8, 10)  # width capped at the limit
    assert padding.pad(StepShape(64, 8, 10)) == StepShape(64, 8, 10)
    assert [padding.rows(n) for n in (1, 3, 9, 20)] == [1, 4, 16, 32]


def test_an_engine_larger_than_the_buckets_is_refused() -> None:
    with pytest.raises(BucketConfigError, match="batch size 16 exceeds the largest batch size "
                                                r"bucket 8 \(PAGODA_GAUDI_BUCKETS_BATCH\)"):
        BucketPadding(CONFIG, StepShape(64, 16, 4))


def _greedy(path: Path, prompts: list[list[int]]) -> list[list[int]]:
    llm = LLM(str(path), device="cpu", dtype="float32", num_kv_blocks=64, block_size=4,
              max_num_seqs=8, max_num_batched_tokens=24)  # prefills chunk among decodes
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outputs]


def test_engine_steps_run_at_bucket_shapes(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path = make_checkpoint(tmp_path, tiny_configs()["llama"])
    rng = random.Random(3)
    prompts = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in (5, 19, 2, 11, 30)]
    unpadded = _greedy(path, prompts)

    shapes: list[tuple[StepShape, StepShape]] = []  # (the step's own, what ran)
    build = model_runner.build_step_inputs

    def recording_build(scheduled, block_size, device, padding=None):
        inputs = build(scheduled, block_size, device, padding)
        own = StepShape(sum(len(s.token_ids) for s in scheduled), len(scheduled),
                        max(len(s.block_ids) for s in scheduled))
        shapes.append((own, inputs.shape))
        return inputs

    monkeypatch.setattr(model_runner, "build_step_inputs", recording_build)
    monkeypatch.setattr(CpuPlatform, "step_padding",
                        lambda self, limits: BucketPadding(CONFIG, limits))
    assert _greedy(path, prompts) == unpadded
    assert shapes and any(own != ran for own, ran in shapes)
    for own, ran in shapes:
        decodes_only = own.num_tokens == own.num_seqs
        assert ran.num_seqs in BATCH_BUCKETS and ran.num_seqs >= own.num_seqs
        if decodes_only:
            assert ran.num_tokens == ran.num_seqs
        else:
            assert ran.num_tokens in TOKEN_BUCKETS and ran.num_tokens >= own.num_tokens
        assert ran.max_blocks >= own.max_blocks
