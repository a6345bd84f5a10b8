"""What a prepared quantized weight holds on the CPU, for one activation dtype: the
dequantized weight (`DenseLayout`), PyTorch's int4 kernel's packed weight (`Int4Layout`)
or the int8 weight for `torch._int_mm` (`Int8Layout`). `apply(flat, bias)` takes x [T, K]
and returns x @ W^T + bias [T, N] in float32 or x's dtype (the op casts it). Which one a
layer gets, and why, is `pagoda_cpu.quant_ops`'."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pagoda.quant.tensors import INT8_MAX, Int8Weight, per_token_scale, quantize_int8
from pagoda_cpu.ops import linear

INT4_GROUPS = (256, 128, 64, 32)
"""The group sizes `_weight_int4pack_mm_for_cpu` accepts, largest first."""
INT4_N_MULTIPLE = 16
"""`_convert_weight_to_int4pack_for_cpu` wants the output rows in multiples of 16."""


class DenseLayout:
    """The dequantized weight; the activations are cast to its dtype for the product."""

    def __init__(self, weight: torch.Tensor):
        self.weight = weight

    def apply(self, flat: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        w = self.weight
        b = None if bias is None else bias.to(w.dtype)
        return linear(flat.to(w.dtype), w, b)


class Int4Layout:
    """`_weight_int4pack_mm_for_cpu`'s packed weight [N', K / 2] (N' = N padded to 16) and
    its scales and zeros [K / group, N', 2] in the activation dtype (w = (q - 8) * scale +
    zero).

    Rounding a zero to bfloat16 moves every weight of its group alike, which adds up over
    the group's inputs (asymmetric groups: |zero| up to 8 scales); that error is put back:
    `zero_residual` [G, N'] (G = K / group) is what rounding took away, and x's sums over
    each group times it are added to the output in float32 (one addmm: a bfloat16 mm of
    one row costs ~18 us here, a float32 one ~3). It costs 4 bytes a group and output
    (groups of 32: 1/8 byte a weight). Symmetric groups (zero 0) have none.
    """

    def __init__(self, packed: torch.Tensor, group: int, scales_and_zeros: torch.Tensor,
                 n: int, dtype: torch.dtype = torch.bfloat16):
        self.packed, self.group, self.n = packed, group, n
        self.dtype = dtype
        self.scales_and_zeros = scales_and_zeros.to(dtype)
        residual = scales_and_zeros[..., 1].float() - self.scales_and_zeros[..., 1].float()
        self.zero_residual = residual if bool(residual.any()) else None

    def apply(self, flat: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        sz = self.scales_and_zeros
        if flat.dtype != sz.dtype:  # only when one weight serves two model dtypes
            sz = sz.to(flat.dtype)
        xin = flat.contiguous()
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(xin, self.packed, self.group, sz)
        if self.zero_residual is not None or bias is not None:
            y = y.float()
            if self.zero_residual is not None:
                sums = xin.view(xin.shape[0], -1, self.group).sum(-1, dtype=torch.float32)
                y = y.addmm_(sums, self.zero_residual)
            if bias is not None:
                y = y[:, : self.n] + bias.float()
        return y[:, : self.n] if y.shape[1] != self.n else y


class Int8Layout:
    """The int8 weight as `torch._int_mm`'s right operand [K, N] (a transposed view), its
    float32 row scales [1, N] and the static input scale [1, 1] if any."""

    def __init__(self, weight: Int8Weight):
        self.weight_t = weight.weight.t()
        self.scale = weight.scale.float().reshape(1, -1)
        self.input_scale = (None if weight.input_scale is None
                            else weight.input_scale.float().reshape(1, 1))

    def apply(self, flat: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        scale = (per_token_scale(flat, INT8_MAX) if self.input_scale is None
                 else self.input_scale)
        acc = torch._int_mm(quantize_int8(flat, scale), self.weight_t)
        y = acc.float() * scale * self.scale
        return y if bias is None else y + bias.float()


Layout = DenseLayout | Int4Layout | Int8Layout


def int4_kernel_group(group_size: int) -> int | None:
    """The largest kernel group size that divides `group_size` (None: none does)."""
    if not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"):
        return None
    return next((g for g in INT4_GROUPS if group_size % g == 0), None)


def pack_int4(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor,
              group_size: int, dtype: torch.dtype = torch.bfloat16) -> Int4Layout:
    """4-bit codes [N, K] with the kernel's scales and zeros [N, K / group_size]
    (w = (q - 8) * scale + zero) as an `Int4Layout`."""
    kernel_group = int4_kernel_group(group_size)
    assert kernel_group is not None
    repeat = group_size // kernel_group
    scales = scales.float().repeat_interleave(repeat, 1)
    zeros = zeros.float().repeat_interleave(repeat, 1)
    n = codes.shape[0]
    pad = -n % INT4_N_MULTIPLE
    codes = codes.to(torch.int32)
    if pad:  # rows of zero weights (scale and zero 0), cut from the output
        codes = F.pad(codes, (0, 0, 0, pad))
        scales, zeros = F.pad(scales, (0, 0, 0, pad)), F.pad(zeros, (0, 0, 0, pad))
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
    scales_and_zeros = torch.stack([scales, zeros], dim=-1).transpose(0, 1).contiguous()
    return Int4Layout(packed, kernel_group, scales_and_zeros, n, dtype=dtype)
