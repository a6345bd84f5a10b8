"""Round-to-nearest quantization of dense weights into the canonical forms: the online
methods (`--quantization fp8|int8|int4` on a dense checkpoint) and the test inputs."""

from __future__ import annotations

import torch

from pagoda.quant.tensors import (
    FP8_DTYPE,
    FP8_MAX,
    INT8_MAX,
    MIN_SCALE,
    Fp8Weight,
    GroupQuantWeight,
    Int8Weight,
)


def fp8_weight(w: torch.Tensor, block: tuple[int, int] | None = None) -> Fp8Weight:
    """w [N, K] as e4m3 with a scale per row (amax / 448), or per (bn, bk) block."""
    wf = w.float()
    if block is None:
        scale = wf.abs().amax(dim=1).clamp(min=MIN_SCALE) / FP8_MAX
        q = (wf / scale.unsqueeze(1)).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
        return Fp8Weight(q, scale)
    bn, bk = block
    n, k = wf.shape
    padded = torch.nn.functional.pad(wf, (0, -k % bk, 0, -n % bn))
    tiles = padded.view(padded.shape[0] // bn, bn, padded.shape[1] // bk, bk)
    scale = tiles.abs().amax(dim=(1, 3)).clamp(min=MIN_SCALE) / FP8_MAX
    full = scale.repeat_interleave(bn, 0)[:n].repeat_interleave(bk, 1)[:, :k]
    q = (wf / full).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return Fp8Weight(q, scale, block=block)


def int8_weight(w: torch.Tensor) -> Int8Weight:
    """w [N, K] as int8 with a symmetric scale per row (amax / 127)."""
    wf = w.float()
    scale = wf.abs().amax(dim=1).clamp(min=MIN_SCALE) / INT8_MAX
    q = torch.round(wf / scale.unsqueeze(1)).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    return Int8Weight(q, scale)


def group_weight(w: torch.Tensor, bits: int = 4, group_size: int = 128,
                 symmetric: bool = True) -> GroupQuantWeight:
    """w [N, K] as `bits`-bit codes per group of `group_size` inputs, round to nearest:
    symmetric (codes centred on 2**(bits-1), scale = amax / ((2**bits - 1) / 2)) or
    asymmetric (scale = (max - min) / (2**bits - 1) and an integer zero point)."""
    n, k = w.shape
    if k % group_size:
        raise ValueError(f"{k} inputs are not whole groups of {group_size}")
    levels = 2**bits - 1
    groups = w.float().view(n, k // group_size, group_size)
    if symmetric:
        half = 2 ** (bits - 1)
        scale = (groups.abs().amax(dim=-1) / ((levels) / 2)).clamp(min=MIN_SCALE)
        codes = (torch.round(groups / scale.unsqueeze(-1)) + half).clamp(0, levels)
        offsets = -half * scale
    else:
        lo, hi = groups.amin(dim=-1).clamp(max=0), groups.amax(dim=-1).clamp(min=0)
        scale = ((hi - lo) / levels).clamp(min=MIN_SCALE)
        zero = torch.round(-lo / scale).clamp(0, levels)
        codes = (torch.round(groups / scale.unsqueeze(-1)) + zero.unsqueeze(-1)).clamp(0, levels)
        offsets = -zero * scale
    return GroupQuantWeight(codes.to(torch.uint8).view(n, k), scale, offsets, bits)
