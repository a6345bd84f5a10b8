"""Sampling from processed logits: one program per row, one pass over the vocabulary.

Each tile of 4 * LANES tokens is laid out [LANES, 4]: lane g holds tokens 4g..4g+3, whose
noise is the four words of one Philox call. Every lane keeps its best score and the first
index that reached it; the row's token is the first index of the best score.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.common import pow2
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, TritonLaunch

MAX_LANES = 256
"""Philox calls per tile (4 tokens each)."""


@triton.jit
def _philox4x32(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 on uint32 words, as `pagoda.ops.reference.philox4x32`."""
    for _ in tl.static_range(10):
        hi0 = tl.umulhi(c0, 0xD2511F53)
        hi1 = tl.umulhi(c2, 0xCD9E8D57)
        lo0 = c0 * 0xD2511F53
        lo1 = c2 * 0xCD9E8D57
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = k0 + 0x9E3779B9
        k1 = k1 + 0xBB67AE85
    return c0, c1, c2, c3


@triton.jit
def _sample_kernel(
    tokens_ptr, logits_ptr, temperature_ptr, seeds_ptr, offsets_ptr, vocab_size, stride,
    LANES: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    temperature = tl.load(temperature_ptr + row)
    draw = temperature != 0.0
    scale = tl.where(draw, temperature, 1.0)
    seed = tl.load(seeds_ptr + row).to(tl.uint64, bitcast=True)
    offset = tl.load(offsets_ptr + row).to(tl.uint64, bitcast=True)
    zero = tl.zeros([LANES], dtype=tl.uint32)
    k0 = zero + (seed & 0xFFFFFFFF).to(tl.uint32)
    k1 = zero + (seed >> 32).to(tl.uint32)
    c1 = zero + (offset & 0xFFFFFFFF).to(tl.uint32)
    c2 = zero + (offset >> 32).to(tl.uint32)
    lane = tl.arange(0, LANES)
    word = tl.arange(0, 4)[None, :]
    best = tl.full([LANES, 4], float("-inf"), tl.float32)
    best_index = tl.zeros([LANES, 4], dtype=tl.int32)
    for start in range(0, vocab_size, 4 * LANES):
        group = start // 4 + lane
        index = group[:, None] * 4 + word
        x = tl.load(logits_ptr + row * stride + index, mask=index < vocab_size,
                    other=float("-inf")).to(tl.float32)
        if draw:
            r0, r1, r2, r3 = _philox4x32(group.to(tl.uint32), c1, c2, zero, k0, k1)
            bits = tl.where(word == 0, r0[:, None], tl.where(
                word == 1, r1[:, None], tl.where(word == 2, r2[:, None], r3[:, None])))
            u = ((bits >> 9).to(tl.float32) + 0.5) * (1.0 / 8388608.0)  # 2**-23
            x = tl.math.div_rn(x, scale) - tl.log(-tl.log(u))  # IEEE division, as torch's
        better = x > best
        best = tl.where(better, x, best)
        best_index = tl.where(better, index, best_index)
    top = tl.max(tl.max(best, axis=1), axis=0)
    first = tl.min(tl.min(tl.where(best == top, best_index, vocab_size), axis=1), axis=0)
    tl.store(tokens_ptr + row, first.to(tl.int64))


def sample_from_logits(
    logits: torch.Tensor, temperature: torch.Tensor, seeds: torch.Tensor, offsets: torch.Tensor,
    *, launch: TritonLaunch = DEFAULT_LAUNCH,
) -> torch.Tensor:
    """See `pagoda.ops.reference.sample_from_logits`."""
    num_rows, vocab_size = logits.shape
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    out = torch.empty(num_rows, dtype=torch.int64, device=logits.device)
    if num_rows:
        _sample_kernel[(num_rows,)](
            out, logits, temperature.float().contiguous(), seeds.long().contiguous(),
            offsets.long().contiguous(), vocab_size, logits.stride(0),
            LANES=min(pow2((vocab_size + 3) // 4), MAX_LANES), **launch.elementwise.kwargs(),
        )
    return out
