"""GGUF Q4_0/Q4_1 linear weights kept 4-bit and applied with PyTorch's CPU int4 kernel.

`_weight_int4pack_mm_for_cpu(x, packed, group, scales_and_zeros)` computes x @ W^T with
W = (q - 8) * scale + zero per group of 32 inputs, so a GGUF block w = d * q + m maps to
scale = d, zero = m + 8d (exact up to rounding both to bfloat16). It wants bfloat16
activations: float32 ones are converted for the call and the result converted back.

A layer moves through three states: loading (`weight` holds uint8 codes [N, K] beside
`weight_scale` / `weight_offset`), packed (`weight` is the kernel's uint8 layout beside
`scales_and_zeros`), or dense (`weight` in the model dtype) when its shape does not fit the
kernel or some shard of it is not Q4_0/Q4_1 in the file.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.quant import CheckpointTensor, Int4Weight, QuantMethod
from pagoda.quant.checkpoint import copy_weight

GROUP = 32
_N_MULTIPLE = 16  # the packing wants output rows in multiples of 16


def _frozen(tensor: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(tensor, requires_grad=False)


class GGUFInt4Method(QuantMethod):
    """Keeps Q4_0/Q4_1 GGUF linear weights 4-bit (0.625 bytes a weight with scales)."""

    name = "gguf"
    checkpoint_format = "gguf"

    def create_weights(
        self, layer: nn.Module, input_size: int, output_size: int, dtype: torch.dtype
    ) -> None:
        layer.dense_dtype = dtype
        if input_size % GROUP or output_size % _N_MULTIPLE:
            layer.weight = _frozen(torch.empty(output_size, input_size, dtype=dtype))
            return
        groups = input_size // GROUP
        layer.weight = _frozen(torch.empty(output_size, input_size, dtype=torch.uint8))
        layer.register_buffer("weight_scale", torch.empty(output_size, groups))
        layer.register_buffer("weight_offset", torch.empty(output_size, groups))

    def load_weight(
        self, layer: nn.Module, loaded: CheckpointTensor, shard: str | None, name: str
    ) -> None:
        loading = hasattr(layer, "weight_scale")
        if loading and isinstance(loaded, Int4Weight) and loaded.group_size == GROUP:
            parts = (layer.weight, layer.weight_scale, layer.weight_offset)
            for param, part in zip(parts, (loaded.codes, loaded.scales, loaded.offsets)):
                copy_weight(param if shard is None else layer.shard_view(param, shard), part, name)
            return
        if loading:
            _make_dense(layer)
        super().load_weight(layer, loaded, shard, name)

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        if not hasattr(layer, "weight_scale"):
            return
        scale, offset = layer.weight_scale, layer.weight_offset
        zero = offset + 8 * scale
        # [N, K / 32, 2] -> [K / 32, N, 2], as the kernel wants.
        scales_and_zeros = torch.stack([scale, zero], dim=-1).transpose(0, 1).contiguous()
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(layer.weight.to(torch.int32), 1)
        del layer.weight_scale, layer.weight_offset
        layer.weight = _frozen(packed)
        layer.register_buffer("scales_and_zeros", scales_and_zeros.to(torch.bfloat16))

    def apply(
        self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        if layer.weight.dtype != torch.uint8:
            return F.linear(x, layer.weight, bias)
        flat = x.reshape(-1, x.shape[-1]).to(torch.bfloat16).contiguous()
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(
            flat, layer.weight, GROUP, layer.scales_and_zeros
        )
        y = y.to(x.dtype).view(*x.shape[:-1], y.shape[-1])
        return y if bias is None else y + bias


def _make_dense(layer: nn.Module) -> None:
    """Turn a loading layer dense, keeping the rows of shards loaded so far."""
    codes = Int4Weight(layer.weight, layer.weight_scale, layer.weight_offset)
    del layer.weight_scale, layer.weight_offset
    layer.weight = _frozen(codes.dequantize().to(layer.dense_dtype))
