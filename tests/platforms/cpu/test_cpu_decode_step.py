"""cpu_sdpa's one-call decode step (`pagoda_cpu.paged_attention.decode_step`): the native
kernel writes the step's keys and values (skipping slot -1, refusing slots outside the
cache) and attends, as core's reference write + attention do; other steps are declined."""

from __future__ import annotations

import pytest
import torch

from pagoda.attention import reference
from pagoda.testing import dtype_name
from pagoda.testing.paged import DECODE_BATCH, MIXED_BATCH, random_paged_batch
from pagoda_cpu import csrc
from pagoda_cpu.paged_attention import decode_step

C = pytest.importorskip("pagoda_cpu._C", reason="pagoda-cpu's native kernels are not built")
HEADS, KV_HEADS, HEAD, BLOCK = 6, 2, 32, 4


@pytest.fixture(params=csrc.cpu_isas())
def isa(request: pytest.FixtureRequest):
    csrc.native()
    default = C.isa()
    csrc.use_isa(C, request.param)
    yield request.param
    C.set_isa(default)


def _step(seqs, dtype: torch.dtype, seed: int):
    """A random paged step: metadata, cache, query and key/value as strided views of one
    qkv projection (as the model passes them)."""
    gen = torch.Generator().manual_seed(seed)
    batch = random_paged_batch(seqs, BLOCK, gen)
    tokens = batch.num_tokens
    cache = torch.randn(2, batch.num_blocks, BLOCK, KV_HEADS, HEAD, generator=gen).to(dtype)
    qkv = torch.randn(tokens, (HEADS + 2 * KV_HEADS) * HEAD, generator=gen).to(dtype)
    q, k, v = qkv.split([HEADS * HEAD, KV_HEADS * HEAD, KV_HEADS * HEAD], dim=-1)
    shape = (tokens, -1, HEAD)
    return batch.metadata(), cache, q.reshape(shape).contiguous(), k.view(shape), v.view(shape)


@pytest.mark.parametrize("window,cap", [(None, None), (5, None), (None, 3.0)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_name)
def test_decode_step_matches_reference_write_and_attention(
        dtype: torch.dtype, window: int | None, cap: float | None, isa: str) -> None:
    meta, cache, q, k, v = _step(DECODE_BATCH, dtype, seed=7)
    meta.slot_mapping[1] = -1  # this token is not cached: its slot keeps what it held
    want_cache = cache.clone()
    reference.write_kv_cache(k, v, want_cache, meta.slot_mapping)
    want = reference.paged_attention(q, want_cache, meta.block_tables, meta.query_start_loc,
                                     meta.seq_lens, 0.3, window, cap)
    got = decode_step(q, k, v, cache, meta, 0.3, window, cap)
    assert got is not None
    assert torch.equal(cache, want_cache)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def test_decode_step_refuses_a_slot_outside_the_cache() -> None:
    meta, cache, q, k, v = _step(DECODE_BATCH, torch.float32, seed=8)
    meta.slot_mapping[2] = cache.shape[1] * BLOCK
    with pytest.raises(RuntimeError, match="outside the cache"):
        decode_step(q, k, v, cache, meta, 0.3, None, None)


def test_decode_step_declines_other_steps() -> None:
    meta, cache, q, k, v = _step(MIXED_BATCH, torch.float32, seed=9)
    assert decode_step(q, k, v, cache, meta, 0.3, None, None) is None  # prefills too
    meta, cache, q, k, v = _step(DECODE_BATCH, torch.float32, seed=9)
    assert decode_step(q, k.half(), v.half(), cache, meta, 0.3, None, None) is None


def test_a_padding_sequence_of_length_zero_attends_to_nothing(isa: str) -> None:
    """A bucketed step's padding (length 0, slot -1) stays on the native path: zeros for
    it, the reference's attention for the others."""
    meta, cache, q, k, v = _step(DECODE_BATCH, torch.float32, seed=9)
    meta.seq_lens[0] = 0
    meta.slot_mapping[0] = -1
    want_cache = cache.clone()
    reference.write_kv_cache(k, v, want_cache, meta.slot_mapping)
    got = decode_step(q, k, v, cache, meta, 0.3, None, None)
    assert got is not None
    assert torch.equal(cache, want_cache)
    assert torch.equal(got[0], torch.zeros_like(got[0]))
    rest = torch.arange(q.shape[0], dtype=meta.query_start_loc.dtype)
    want = reference.paged_attention(q[1:], want_cache, meta.block_tables[1:], rest,
                                     meta.seq_lens[1:], 0.3, None, None)
    torch.testing.assert_close(got[1:], want, rtol=1e-5, atol=1e-5)
