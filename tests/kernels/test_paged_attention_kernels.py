"""The "triton" attention backend matches the reference on the attention kit's mixed
batches (prefills, prefill chunks, decodes, shuffled block tables, GQA/MQA, sliding
windows, soft-capping, padding): as it plans its launches, and with every sequence's keys
split into ranges reduced by the second kernel; with an fp8 cache too, whose write kernel
stores exactly the bytes of PyTorch's cast."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("triton")

from pagoda.attention import AttentionImpl, AttentionMetadata, reference  # noqa: E402
from pagoda.kernels.triton import num_kv_splits, paged_attention  # noqa: E402
from pagoda.kernels.triton.attention import (  # noqa: E402
    MAX_SPLITS,
    TILE_N,
    attention_params,
)
from pagoda.kernels.triton.backend import (  # noqa: E402
    TritonAttentionBackend,
    TritonAttentionImpl,
)
from pagoda.kernels.triton.kv_cache import write_kv_cache  # noqa: E402
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, LaunchParams, TritonLaunch  # noqa: E402
from pagoda.testing import (  # noqa: E402
    ATTENTION_CASES,
    TOLERANCES,
    check_attention_backend,
    dtype_name,
)
from pagoda.testing.paged import random_paged_batch  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16]
CUDA_LIKE = TritonLaunch(fp8_decode_attention=LaunchParams(num_warps=2, num_stages=2,
                                                           maxnreg=128))
"""The fp8 decode launch pagoda-cuda chooses (`pagoda_cuda.triton_ops.FP8_DECODE_ATTENTION`)."""


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
@pytest.mark.parametrize("query_len", [1, 4])
def test_long_context_decode_split(window: int | None, query_len: int, device: str) -> None:
    """Decodes (and verify steps of 4 tokens a sequence) over a few hundred keys (many tiles
    per split), GQA 8/2, block size 16."""
    gen = torch.Generator().manual_seed(34)
    batch = random_paged_batch([(query_len, 300), (query_len, 150), (query_len, 37)], 16, gen)
    meta = batch.metadata()
    query = torch.randn(batch.num_tokens, 8, 64, generator=gen)
    cache = torch.randn(2, batch.num_blocks, 16, 2, 64, generator=gen)
    args = (meta.block_tables, meta.query_start_loc, meta.seq_lens, 1 / math.sqrt(64), window)
    want = reference.paged_attention(query, cache, *args)
    on = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
    for splits in (1, 4):
        got = paged_attention(query.to(device), cache.to(device), *on,
                              max_query_len=query_len, num_splits=splits, tile_n=16)
        tol = TOLERANCES[torch.float32]
        torch.testing.assert_close(got.cpu(), want, atol=tol.atol, rtol=tol.rtol)


@pytest.mark.parametrize("fp8", [False, True], ids=["float32 cache", "fp8 cache"])
def test_decode_step_padded_as_a_graph_pads_it(fp8: bool, device: str) -> None:
    """A decode step padded to a captured size (`DecodeGraphs`): each padding token a
    sequence of its own of length 0, after the step's own. The step's tokens get the
    unpadded step's output (one program a sequence, no search over query starts); the
    padding tokens attend to nothing (zeros)."""
    gen = torch.Generator().manual_seed(39)
    batch = random_paged_batch([(1, 300), (1, 150), (1, 37)], 16, gen)
    meta = batch.metadata()
    query = torch.randn(5, 8, 64, generator=gen)
    cache = torch.randn(2, batch.num_blocks, 16, 2, 64, generator=gen)
    kv_scales = None
    if fp8:
        cache, kv_scales = (cache * 20).to(FP8), torch.tensor([0.05, 0.3])
    want = reference.paged_attention(query[:3], cache, meta.block_tables, meta.query_start_loc,
                                     meta.seq_lens, 1 / math.sqrt(64), None, None, kv_scales)
    tables = torch.cat([meta.block_tables, torch.zeros_like(meta.block_tables[:2])])
    starts = torch.arange(6, dtype=meta.query_start_loc.dtype)
    lens = torch.cat([meta.seq_lens, torch.zeros_like(meta.seq_lens[:2])])
    on = [t.to(device) if t is not None else None
          for t in (query, cache, tables, starts, lens, kv_scales)]
    got = paged_attention(*on[:5], 1 / math.sqrt(64), None, None, on[5], max_query_len=1,
                          launch=CUDA_LIKE).cpu()
    tol = TOLERANCES[torch.float32]
    torch.testing.assert_close(got[:3], want, atol=tol.atol, rtol=tol.rtol)
    assert torch.equal(got[3:], torch.zeros_like(got[3:]))


def test_split_planning() -> None:
    cpu = torch.device("cpu")  # one parallel unit: never worth splitting
    assert num_kv_splits(1, 1, 1, 100_000, cpu) == 1
    if torch.cuda.is_available():
        gpu = torch.device("cuda")
        assert num_kv_splits(1, 8, 1, 100_000, gpu) == MAX_SPLITS  # one long decode
        assert num_kv_splits(1, 8, 1, 3 * TILE_N, gpu) == 3  # one a key tile at most
        assert num_kv_splits(1, 8, 4, 100_000, gpu) == MAX_SPLITS  # one verify step of 3 drafts
        assert num_kv_splits(1, 8, 512, 100_000, gpu) == 1  # a prefill
        assert num_kv_splits(4096, 8, 1, 100_000, gpu) == 1  # the GPU is busy anyway


FP8 = torch.float8_e4m3fn


@pytest.mark.parametrize("backend", [TritonAttentionBackend, _SplitKeysBackend],
                         ids=["planned", "split-keys"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_backend_matches_reference_with_an_fp8_cache(
    backend: type[TritonAttentionBackend], dtype: torch.dtype, device: str
) -> None:
    report = check_attention_backend(backend, dtype, device=device, seed=35, kv_cache_dtype=FP8)
    report.raise_for_failures()
    assert len(report.checked) == len(ATTENTION_CASES)


def _every_e4m3_value_and_midpoint(gen: torch.Generator) -> torch.Tensor:
    """Every finite e4m3 value, every midpoint between neighbours (ties), random values
    across the range, beyond it (saturated) and below the subnormals, and -0.0."""
    grid = torch.arange(256, dtype=torch.uint8).view(FP8).float()
    grid = grid[~grid.isnan()].unique()
    return torch.cat([grid, (grid[1:] + grid[:-1]) / 2, torch.randn(3000, generator=gen) * 40,
                      torch.randn(500, generator=gen) * 1e-3,
                      torch.tensor([-0.0, 448.5, 500.0, -1e4, 1e-30, -1e-30])])


@pytest.mark.parametrize("scales", [(1.0, 1.0), (0.37, 2.5), (0.0071, 1 / 3)])
def test_fp8_write_stores_the_bytes_of_torchs_cast(scales: tuple[float, float],
                                                   device: str) -> None:
    """clamp(x / scale, +-448) rounded to the nearest e4m3 (ties to even), bit for bit (but
    for the sign of a zero: the GPU's conversion drops it where torch's keeps it); the
    interpreter's own float8 cast rounds ties away and mangles carries, so the kernel rounds
    in float32 first."""
    x = _every_e4m3_value_and_midpoint(torch.Generator().manual_seed(36))
    head = 16
    x = x[: len(x) // (2 * head) * 2 * head].view(-1, 2, head)  # [T, K=2, D]
    key, value = x, x.flip(0) * 3
    slots = torch.randperm(len(x), generator=torch.Generator().manual_seed(37))
    kv_scales = torch.tensor(scales)
    want = torch.zeros(2, len(x), 1, 2, head, dtype=FP8)
    reference.write_kv_cache(key, value, want, slots, kv_scales)
    cache = torch.zeros_like(want, device=device)
    write_kv_cache(key.to(device), value.to(device), cache, slots.to(device),
                   kv_scales.to(device))
    got, expected = cache.cpu().view(torch.uint8), want.view(torch.uint8)
    zeros = (cache.cpu().float() == 0) & (want.float() == 0)
    wrong = ((got != expected) & ~zeros).nonzero()
    assert len(wrong) == 0, (f"{len(wrong)} bytes differ, first at {wrong[0].tolist()}: "
                             f"{cache.cpu()[tuple(wrong[0])].item()} != "
                             f"{want[tuple(wrong[0])].item()}")


@pytest.mark.parametrize("launch", [DEFAULT_LAUNCH, CUDA_LIKE], ids=["default", "2-warp decode"])
def test_long_context_decode_split_with_an_fp8_cache(launch: TritonLaunch, device: str) -> None:
    """Decodes over an fp8 cache, keys whole and split; under `CUDA_LIKE` the unsplit steps
    take its `fp8_decode_attention` launch."""
    gen = torch.Generator().manual_seed(38)
    batch = random_paged_batch([(1, 300), (1, 150), (1, 37)], 16, gen)
    meta = batch.metadata()
    query = torch.randn(batch.num_tokens, 8, 64, generator=gen)
    cache = (torch.randn(2, batch.num_blocks, 16, 2, 64, generator=gen) * 20).to(FP8)
    kv_scales = torch.tensor([0.05, 0.3])
    args = (meta.block_tables, meta.query_start_loc, meta.seq_lens, 1 / math.sqrt(64), None,
            None, kv_scales)
    want = reference.paged_attention(query, cache, *args)
    on = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
    for splits in (1, 4):
        got = paged_attention(query.to(device), cache.to(device), *on, max_query_len=1,
                              num_splits=splits, tile_n=16, launch=launch)
        tol = TOLERANCES[torch.float32]
        torch.testing.assert_close(got.cpu(), want, atol=tol.atol, rtol=tol.rtol)


def test_fp8_decode_steps_take_their_own_launch() -> None:
    """`fp8_decode_attention` serves exactly the unsplit steps of one query token a sequence
    over an fp8 cache; every other step, and a launch without it, keeps `attention`."""
    chosen = CUDA_LIKE.fp8_decode_attention
    assert attention_params(CUDA_LIKE, fp8=True, one_query=True, num_splits=1) == chosen
    for fp8, one_query, splits in [(False, True, 1), (True, False, 1), (True, True, 4)]:
        assert attention_params(CUDA_LIKE, fp8, one_query, splits) == CUDA_LIKE.attention
    assert attention_params(DEFAULT_LAUNCH, True, True, 1) == DEFAULT_LAUNCH.attention
