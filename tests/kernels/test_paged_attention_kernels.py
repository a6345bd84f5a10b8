"""The "triton" attention backend matches the reference on the attention kit's mixed
batches (prefills, prefill chunks, decodes, shuffled block tables, GQA/MQA, sliding
windows, soft-capping, padding): as it plans its launches, and with every sequence's keys
split into ranges reduced by the second kernel."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("triton")

from pagoda.attention import AttentionImpl, AttentionMetadata, reference  # noqa: E402
from pagoda.kernels.triton import num_kv_splits, paged_attention  # noqa: E402
from pagoda.kernels.triton.attention import MAX_SPLITS, MIN_SPLIT_KEYS  # noqa: E402
from pagoda.kernels.triton.backend import (  # noqa: E402
    TritonAttentionBackend,
    TritonAttentionImpl,
)
from pagoda.testing import (  # noqa: E402
    ATTENTION_CASES,
    TOLERANCES,
    check_attention_backend,
    dtype_name,
)
from pagoda.testing.paged import random_paged_batch  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16]


class _SplitKeysImpl(TritonAttentionImpl):
    """Every sequence's keys in 3 ranges of 16-key tiles, whatever the batch."""

    tile_n = 16

    def num_splits(self, metadata: AttentionMetadata, device: torch.device) -> int:
        return 3


class _SplitKeysBackend(TritonAttentionBackend):
    @classmethod
    def get_impl_cls(cls) -> type[AttentionImpl]:
        return _SplitKeysImpl


@pytest.mark.parametrize("backend", [TritonAttentionBackend, _SplitKeysBackend],
                         ids=["planned", "split-keys"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_backend_matches_reference(backend: type[TritonAttentionBackend], dtype: torch.dtype,
                                   device: str) -> None:
    report = check_attention_backend(backend, dtype, device=device, seed=33)
    report.raise_for_failures()
    assert len(report.checked) == len(ATTENTION_CASES)


@pytest.mark.parametrize("window", [None, 100])
def test_long_context_decode_split(window: int | None, device: str) -> None:
    """Decodes over a few hundred keys (many tiles per split), GQA 8/2, block size 16."""
    gen = torch.Generator().manual_seed(34)
    batch = random_paged_batch([(1, 300), (1, 150), (1, 37)], 16, gen)
    meta = batch.metadata()
    query = torch.randn(batch.num_tokens, 8, 64, generator=gen)
    cache = torch.randn(2, batch.num_blocks, 16, 2, 64, generator=gen)
    args = (meta.block_tables, meta.query_start_loc, meta.seq_lens, 1 / math.sqrt(64), window)
    want = reference.paged_attention(query, cache, *args)
    on = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
    for splits in (1, 4):
        got = paged_attention(query.to(device), cache.to(device), *on, max_query_len=1,
                                   num_splits=splits, tile_n=16)
        tol = TOLERANCES[torch.float32]
        torch.testing.assert_close(got.cpu(), want, atol=tol.atol, rtol=tol.rtol)


def test_split_planning() -> None:
    cpu = torch.device("cpu")  # one parallel unit: never worth splitting
    assert num_kv_splits(1, 1, 1, 100_000, cpu) == 1
    if torch.cuda.is_available():
        gpu = torch.device("cuda")
        assert num_kv_splits(1, 8, 1, 100_000, gpu) == MAX_SPLITS  # one long decode
        assert num_kv_splits(1, 8, 1, 3 * MIN_SPLIT_KEYS, gpu) == 3  # bounded by its keys
        assert num_kv_splits(1, 8, 512, 100_000, gpu) == 1  # a prefill
        assert num_kv_splits(4096, 8, 1, 100_000, gpu) == 1  # the GPU is busy anyway
