"""References of the quantized-linear ops: what they compute, in float32 on any device.

Each takes x [..., K] in the model's dtype, a quantized weight in its canonical form
(`pagoda.quant.tensors`) and an optional bias [N], and returns [..., N] in x's dtype. The
activations are quantized exactly as described here (a kernel must round them the same
way); the weight is dequantized and the product accumulated in float32 (int8: exactly).
fp8_linear and int8_linear also take x already quantized per token (a
`QuantizedActivation` [M, K] of their code type: [M, N] in its `dtype`), where their
provider asks for it (`KernelProvider.quantized_input`).

A platform offers these ops only by registering a provider (core registers no fallback):
a provider's `prepare(weight)` turns the canonical weight into its own layout once, at
load (given the model's activation dtype), and its `impl(x, prepared, bias)` runs. The
references' `prepare` is the identity.
"""

from __future__ import annotations

import torch

from pagoda.quant.tensors import (
    FP8_DTYPE,
    FP8_MAX,
    INT8_MAX,
    Fp8Weight,
    GroupQuantWeight,
    Int8Weight,
    QuantizedActivation,
    given_codes,
    per_token_scale,
    quantize_fp8,
    quantize_int8,
    round_activations,
)


def prepare(weight: object, dtype: torch.dtype | None = None) -> object:
    """The references take the canonical weight as it is."""
    return weight


def _finish(y: torch.Tensor, x: torch.Tensor | QuantizedActivation,
            bias: torch.Tensor | None) -> torch.Tensor:
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype).view(*x.shape[:-1], y.shape[-1])


def fp8_linear(x: torch.Tensor | QuantizedActivation, weight: Fp8Weight,
               bias: torch.Tensor | None = None) -> torch.Tensor:
    """x quantized to float8 e4m3 (by `weight.input_scale`, else per token, or per token and
    group of bk inputs for a blocked weight: scale = amax / 448), times the dequantized
    weight, in float32."""
    if isinstance(x, QuantizedActivation):
        codes, scale = given_codes(x, weight, FP8_DTYPE)
        return _finish((codes.float() * scale) @ weight.dequantize().T, x, bias)
    flat = x.reshape(-1, x.shape[-1])
    group = weight.block[1] if weight.block is not None else None
    if weight.input_scale is not None:
        scale = weight.input_scale.float().reshape(1, 1)
    else:
        scale = per_token_scale(flat, FP8_MAX, group)
    xq = quantize_fp8(flat, scale, group).float()
    if group is not None and scale.shape[1] > 1:
        scale = scale.repeat_interleave(group, dim=1)[:, : flat.shape[1]]
    return _finish((xq * scale) @ weight.dequantize().T, x, bias)


def int8_linear(x: torch.Tensor | QuantizedActivation, weight: Int8Weight,
                bias: torch.Tensor | None = None) -> torch.Tensor:
    """x quantized to int8 symmetrically (by `weight.input_scale`, else per token: scale =
    amax / 127, rounded half to even), the int8 product summed exactly, then scaled by
    both scales in float32."""
    if isinstance(x, QuantizedActivation):
        xq, scale = given_codes(x, weight, torch.int8)
    else:
        flat = x.reshape(-1, x.shape[-1])
        if weight.input_scale is not None:
            scale = weight.input_scale.float().reshape(1, 1)
        else:
            scale = per_token_scale(flat, INT8_MAX)
        xq = quantize_int8(flat, scale)
    acc = (xq.double() @ weight.weight.double().T).float()  # exact: |sum| < 2**53
    return _finish(acc * scale * weight.scale.float().unsqueeze(0), x, bias)


def woq_linear(x: torch.Tensor, weight: GroupQuantWeight,
               bias: torch.Tensor | None = None) -> torch.Tensor:
    """Weight-only quantization: x times the dequantized weight, float32; x as it is, or
    rounded to int8 blocks first where the weight says so (`GroupQuantWeight.act_block`)."""
    flat = x.reshape(-1, x.shape[-1]).float()
    if weight.act_block:
        flat = round_activations(flat, weight.act_block)
    return _finish(flat @ weight.dequantize().T, x, bias)
