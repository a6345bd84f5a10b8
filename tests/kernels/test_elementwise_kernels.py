"""The Triton norm, activation, rotary, token-bitmask and KV-cache write kernels match
core's references, on the conformance kit's cases and on the strided views the model layers
pass them."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from pagoda.attention import reference as attention_reference  # noqa: E402
from pagoda.kernels import triton as kernels  # noqa: E402
from pagoda.ops import reference  # noqa: E402
from pagoda.testing import DTYPES, TOLERANCES, check_op, dtype_name  # noqa: E402

OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "gelu_and_mul", "rotary_embedding",
       "apply_token_bitmask")

# (tokens, kv_heads, head_size, num_blocks, block_size, padding tokens)
CACHE_SHAPES = ((1, 1, 64, 2, 16, 0), (37, 2, 80, 6, 16, 5), (20, 8, 128, 9, 5, 3),
                (12, 4, 32, 13, 1, 2), (3, 2, 16, 2, 4, 3))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("op", OPS)
def test_kernel_matches_reference(op: str, dtype: torch.dtype, device: str) -> None:
    report = check_op(op, getattr(kernels, op), dtype, device=device, seed=21)
    report.raise_for_failures()
    assert report.checked and not report.skipped


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("shape", CACHE_SHAPES, ids=str)
def test_kv_cache_write_is_bit_exact(shape: tuple[int, ...], dtype: torch.dtype,
                                     device: str) -> None:
    """Keys and values land in their slots unchanged; padding (slot -1) and every other
    slot of the (random, not zeroed) cache stay as they were."""
    tokens, kv_heads, head_size, num_blocks, block_size, padding = shape
    gen = torch.Generator().manual_seed(sum(shape))
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:tokens]
    slots[torch.randperm(tokens, generator=gen)[:padding]] = -1
    key, value = (torch.randn(tokens, kv_heads, head_size, generator=gen).to(dtype)
                  for _ in range(2))
    cache = torch.randn(2, num_blocks, block_size, kv_heads, head_size, generator=gen).to(dtype)
    on_cache = cache.to(device)
    kernels.write_kv_cache(key.to(device), value.to(device), on_cache, slots.to(device))
    attention_reference.write_kv_cache(key, value, cache, slots)
    assert torch.equal(on_cache.cpu(), cache)


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    tol = TOLERANCES[want.dtype]
    torch.testing.assert_close(got.cpu(), want, atol=tol.atol, rtol=tol.rtol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_name)
def test_strided_views_of_a_fused_qkv(dtype: torch.dtype, device: str) -> None:
    """q/k/v sliced out of one projection (row stride > width), as the attention layer does."""
    gen = torch.Generator().manual_seed(3)
    tokens, heads, kv_heads, head_size, rot_dim = 6, 4, 2, 32, 16
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_size, generator=gen).to(dtype)
    q, k, v = qkv.split([heads * head_size, kv_heads * head_size, kv_heads * head_size], -1)
    q, k, v = (t.view(tokens, -1, head_size) for t in (q, k, v))
    positions = torch.randint(1, 64, (tokens,), generator=gen)
    angles = torch.outer(torch.arange(64.0), torch.rand(rot_dim // 2, generator=gen))
    cos_sin = torch.cat((angles.cos(), angles.sin()), -1)
    on = {name: t.to(device) for name, t in dict(q=q, k=k, v=v, pos=positions).items()}
    for is_neox in (True, False):
        got = kernels.rotary_embedding(on["pos"], on["q"], on["k"], cos_sin.to(device), is_neox)
        want = reference.rotary_embedding(positions, q, k, cos_sin, is_neox)
        for g, w in zip(got, want):
            _close(g, w)

    cache = torch.randn(2, 4, 8, kv_heads, head_size, generator=gen).to(dtype)
    slots = torch.tensor([3, -1, 17, 30, 0, 9])
    on_cache = cache.to(device)
    kernels.write_kv_cache(on["k"], on["v"], on_cache, slots.to(device))
    attention_reference.write_kv_cache(k, v, cache, slots)
    assert torch.equal(on_cache.cpu(), cache)

    rows = qkv[:, : heads * head_size]  # a [T, H*D] view with a wider row stride
    weight = torch.rand(heads * head_size, generator=gen).to(dtype)
    _close(kernels.rms_norm(rows.to(device), weight.to(device), 1e-6),
           reference.rms_norm(rows, weight, 1e-6))


def test_empty_batches(device: str) -> None:
    x = torch.empty(0, 64, device=device)
    assert kernels.rms_norm(x, torch.ones(64, device=device), 1e-6).shape == (0, 64)
    assert kernels.silu_and_mul(x).shape == (0, 32)
