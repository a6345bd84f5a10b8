"""A grammar's token bitmask applied to logits: one pass that reads each logit once and
each packed word once per 32 tokens, instead of expanding the bitmask to one integer a
token (the reference's way)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.kernels.triton.launch import DEFAULT_LAUNCH, TritonLaunch

BLOCK = 1024
"""Tokens a program masks (32 words of the bitmask)."""


@triton.jit
def _apply_token_bitmask_kernel(out_ptr, logits_ptr, bitmask_ptr, vocab_size, words,
                                logits_stride, bitmask_stride, out_stride,
                                BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    token = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = token < vocab_size
    word = token // 32
    packed = tl.load(bitmask_ptr + row * bitmask_stride + word,
                     mask=inside & (word < words), other=0)
    allowed = ((packed >> (token % 32)) & 1) != 0
    x = tl.load(logits_ptr + row * logits_stride + token, mask=inside & allowed,
                other=float("-inf"))
    tl.store(out_ptr + row * out_stride + token, x, mask=inside)


def apply_token_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, *,
                        launch: TritonLaunch = DEFAULT_LAUNCH) -> torch.Tensor:
    """See `pagoda.ops.reference.apply_token_bitmask`."""
    rows, vocab_size = logits.shape
    out = torch.empty_like(logits)
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    bitmask = bitmask.to(torch.int32).contiguous()
    if rows:
        grid = (rows, triton.cdiv(vocab_size, BLOCK))
        _apply_token_bitmask_kernel[grid](
            out, logits, bitmask, vocab_size, bitmask.shape[1], logits.stride(0),
            bitmask.stride(0), out.stride(0), BLOCK=BLOCK, **launch.elementwise.kwargs())
    return out
