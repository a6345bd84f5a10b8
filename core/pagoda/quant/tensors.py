"""Quantized weights in their canonical forms: what the quantized-linear ops take; and
activations quantized per token (`QuantizedActivation`), which the W8A8 linears may take
from the op before them.

Every checkpoint format (FP8 and INT8 checkpoints of compressed-tensors or HF, GPTQ, AWQ,
compressed-tensors pack-quantized, GGUF) is turned into one of these at load; a kernel
provider's `prepare` then turns it into its own layout once. Each form can dequantize
itself: that is what it means, and what the ops' references compute with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import ClassVar, TypeVar

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)  # 448
INT8_MAX = 127
MIN_SCALE = 1e-12
"""Smallest activation scale: an all-zero row quantizes to zeros instead of dividing by 0."""


_W = TypeVar("_W", bound="_Tensors")


class _Tensors:
    """What the quantized forms share: their tensors move together."""

    def to(self: _W, device: torch.device | str) -> _W:
        """The same weight with every tensor on `device`."""
        return replace(self, **{f.name: getattr(self, f.name).to(device) for f in fields(self)
                                if isinstance(getattr(self, f.name), torch.Tensor)})


@dataclass(frozen=True)
class Fp8Weight(_Tensors):
    """A [N, K] float8 (e4m3) weight: w = weight * scale.

    `scale` is float32, either per output row ([N]) or per block ([ceil(N / bn),
    ceil(K / bk)] with `block` = (bn, bk), as HF's fine-grained FP8 and DeepSeek store
    it). Activations are quantized to e4m3 too: with `input_scale` (a float32 scalar,
    static) or per token (per token and group of bk inputs when blocked).
    """

    weight: torch.Tensor
    scale: torch.Tensor
    input_scale: torch.Tensor | None = None
    block: tuple[int, int] | None = None

    @property
    def shape(self) -> torch.Size:
        return self.weight.shape

    def dequantize(self) -> torch.Tensor:
        """The float32 [N, K] values."""
        w = self.weight.float()
        if self.block is None:
            return w * self.scale.float().unsqueeze(1)
        bn, bk = self.block
        n, k = w.shape
        scale = self.scale.float().repeat_interleave(bn, 0)[:n].repeat_interleave(bk, 1)[:, :k]
        return w * scale


@dataclass(frozen=True)
class Int8Weight(_Tensors):
    """A [N, K] int8 weight with a float32 scale per output row: w = weight * scale[:, None].
    Activations are quantized to int8 symmetrically, per token (or by the static
    `input_scale`), and the product accumulates exactly in int32."""

    weight: torch.Tensor
    scale: torch.Tensor
    input_scale: torch.Tensor | None = None
    block: ClassVar[None] = None
    """Never blocked (as an `Fp8Weight` may be): code serving both reads `block` alike."""

    @property
    def shape(self) -> torch.Size:
        return self.weight.shape

    def dequantize(self) -> torch.Tensor:
        return self.weight.float() * self.scale.float().unsqueeze(1)


@dataclass(frozen=True)
class GroupQuantWeight(_Tensors):
    """A [N, K] weight as `bits`-bit codes with a scale and an offset per group of inputs:
    w[n, k] = codes[n, k] * scales[n, g] + offsets[n, g], g = k // group_size.

    Every weight-only integer format is this: symmetric 4-bit (GPTQ sym, compressed-tensors
    W4A16) has offsets = -8 * scales, zero points z give offsets = -z * scales, GGUF Q4_1's
    minimum is the offset, Q8_0 is 8 bits with offsets = -128 * scales.

    `act_block` None: the activations multiply as they are. A number (GGUF's 32): they are
    first rounded to int8 per block of that many inputs (`round_activations`), as ggml's
    CPU dot products round them for GGUF weights (Q8_0 / Q8_1 activations), so that a
    kernel may sum each block's products in integers.
    """

    codes: torch.Tensor
    """uint8 [N, K], values 0 .. 2**bits - 1."""
    scales: torch.Tensor
    """float [N, K // group_size]."""
    offsets: torch.Tensor
    """float [N, K // group_size]."""
    bits: int = 4
    act_block: int | None = None

    @property
    def shape(self) -> torch.Size:
        return self.codes.shape

    @property
    def group_size(self) -> int:
        return self.codes.shape[1] // self.scales.shape[1]

    def map_rows(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> GroupQuantWeight:
        """The same weight with `fn` (an operation on rows) applied to every part."""
        return replace(self, codes=fn(self.codes), scales=fn(self.scales),
                       offsets=fn(self.offsets))

    def narrow(self, dim: int, start: int, length: int) -> GroupQuantWeight:
        """Rows (dim 0) or columns (dim 1, whole groups only) start..start+length."""
        if dim == 0:
            return self.map_rows(lambda t: t.narrow(0, start, length))
        group = self.group_size
        if start % group or length % group:
            raise ValueError(f"columns {start}..{start + length} of a {self.bits}-bit weight "
                             f"cut its groups of {group}")
        return replace(self, codes=self.codes.narrow(1, start, length),
                       scales=self.scales.narrow(1, start // group, length // group),
                       offsets=self.offsets.narrow(1, start // group, length // group))

    def dequantize(self) -> torch.Tensor:
        """The float32 [N, K] values (one float32 buffer made: a 113 MB embedding table is
        not three of them at once while the model loads)."""
        rows, cols = self.codes.shape
        values = self.codes.view(rows, -1, self.group_size).to(torch.float32, copy=True)
        values.mul_(self.scales.float().unsqueeze(-1)).add_(self.offsets.float().unsqueeze(-1))
        return values.view(rows, cols)


QuantizedWeight = Fp8Weight | Int8Weight | GroupQuantWeight


@dataclass(frozen=True)
class QuantizedActivation(_Tensors):
    """Activations x [M, K] quantized per token as a W8A8 linear quantizes its input:
    x ~ codes * scale, with scale = amax / qmax of each row (`per_token_scale`).

    An op that produces a linear's input (a norm, a gated activation) may hand it over in
    this form where the linear's provider takes it (`KernelProvider.quantized_input`), so
    that the activations are not written in `dtype` and read back to be quantized.
    """

    codes: torch.Tensor
    """float8 e4m3 or int8 [M, K]."""
    scale: torch.Tensor
    """float32 [M, 1]."""
    dtype: torch.dtype
    """The type of the activations quantized: a linear given them returns this type."""

    @property
    def shape(self) -> torch.Size:
        return self.codes.shape

    @property
    def device(self) -> torch.device:
        return self.codes.device

    def dequantize(self) -> torch.Tensor:
        """The float32 [M, K] values."""
        return self.codes.float() * self.scale


ACTIVATION_CODES = (FP8_DTYPE, torch.int8)
"""The code types of `QuantizedActivation`: what fp8_linear and int8_linear take."""


def check_activation_code(code_dtype: torch.dtype) -> None:
    """Refuse a code type activations are not quantized to (`ACTIVATION_CODES`)."""
    if code_dtype not in ACTIVATION_CODES:
        raise ValueError(f"activations quantize to {ACTIVATION_CODES}, not {code_dtype}")


def given_codes(x: QuantizedActivation, weight: Fp8Weight | Int8Weight,
                code_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes, scales) of x given quantized to a W8A8 linear of `weight` whose activations
    are `code_dtype`: refused unless the linear would have quantized x so itself
    (dynamically per token, to `code_dtype`)."""
    if x.codes.dtype != code_dtype or weight.input_scale is not None or weight.block:
        how = ("by a static input scale" if weight.input_scale is not None
               else "per token and group" if weight.block else f"per token to {code_dtype}")
        raise ValueError(f"x given quantized per token to {x.codes.dtype}, but this linear "
                         f"quantizes its input {how}")
    return x.codes, x.scale


def quantize_per_token(x: torch.Tensor, code_dtype: torch.dtype) -> QuantizedActivation:
    """x [..., K] as rows [M, K] quantized per token to `code_dtype` (float8 e4m3: scale
    amax / 448, saturated; int8: amax / 127, rounded half to even), as the W8A8 linears'
    references quantize a dynamic input."""
    check_activation_code(code_dtype)
    flat = x.reshape(-1, x.shape[-1])
    fp8 = code_dtype == FP8_DTYPE
    scale = per_token_scale(flat, FP8_MAX if fp8 else INT8_MAX)
    codes = quantize_fp8(flat, scale) if fp8 else quantize_int8(flat, scale)
    return QuantizedActivation(codes, scale, x.dtype)


def per_token_scale(x: torch.Tensor, qmax: float, group: int | None = None) -> torch.Tensor:
    """float32 scales amax / qmax of each row of x [T, K] ([T, 1]), or of each group of
    `group` inputs of each row ([T, ceil(K / group)]), true divisions on every device (as
    `round_activations`' scales)."""
    xf = x.float().abs()
    if group is None:
        amax = xf.amax(dim=-1, keepdim=True)
    else:
        t, k = xf.shape
        pad = -k % group
        amax = torch.nn.functional.pad(xf, (0, pad)).view(t, -1, group).amax(dim=-1)
    amax = amax.clamp(min=MIN_SCALE * qmax)
    return amax / torch.full_like(amax, qmax)


def quantize_fp8(x: torch.Tensor, scale: torch.Tensor,
                 group: int | None = None) -> torch.Tensor:
    """x [T, K] / scale ([T, 1], [T, K / group] or a scalar), saturated, as float8 e4m3."""
    xf = x.float()
    if group is not None and scale.dim() == 2 and scale.shape[1] > 1:
        scale = scale.repeat_interleave(group, dim=1)[:, : x.shape[1]]
    return (xf / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


def quantize_int8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [T, K] / scale ([T, 1] or a scalar), rounded half to even and saturated, as int8."""
    return torch.round(x.float() / scale).clamp(-128, INT8_MAX).to(torch.int8)


def round_activations(x: torch.Tensor, block: int) -> torch.Tensor:
    """x [..., K] (K a multiple of `block`) rounded to int8 per block of `block` inputs, as
    float32 values q * d: d = amax / 127 of the block (amax at least MIN_SCALE * 127) and q
    = x / d rounded half to even (the integers a kernel may multiply instead). Both are
    true float32 divisions on every device: a value on a half (x / d = 2.5, common in 16-bit
    activations) rounds alike wherever it is computed."""
    blocks = x.float().reshape(-1, block)
    amax = blocks.abs().amax(dim=-1, keepdim=True).clamp(min=MIN_SCALE * INT8_MAX)
    # Not amax / 127: CUDA multiplies by the reciprocal of a Python number instead, which
    # moves some d by an ulp and so some x / d off their halves.
    scale = amax / torch.full_like(amax, INT8_MAX)
    return (quantize_int8(blocks, scale).float() * scale).view(x.shape)
