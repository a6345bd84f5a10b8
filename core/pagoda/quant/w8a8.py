"""W8A8 layers: FP8 (e4m3) or INT8 weights with activations quantized per token.

The weight's scale is per tensor (one per checkpoint tensor, so q, k and v of a fused
layer each keep their own: they become per-row scales), per output channel, or (FP8) per
128 x 128 block. A static input scale, when the checkpoint has one per tensor, is the
largest of the fused shards' (they quantize the same input). `online` schemes take a
dense checkpoint and quantize it at load, per channel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from pagoda.quant.layout import PER_SHARD, ParamLayout, add_param
from pagoda.quant.op_method import OpLinearMethod, num_shards, per_row, shard_rows
from pagoda.quant.rtn import fp8_weight, int8_weight
from pagoda.quant.tensors import FP8_DTYPE, Fp8Weight, Int8Weight

Strategy = Literal["tensor", "channel", "block"]


@dataclass(frozen=True)
class W8A8Scheme:
    """How a checkpoint stores a W8A8 layer."""

    strategy: Strategy = "channel"
    block: tuple[int, int] | None = None
    """(rows, columns) of a scale block, for strategy "block"."""
    static_input: bool = False
    """A per-tensor `input_scale` in the checkpoint (else activations scale per token)."""
    scale_name: str = "weight_scale"
    """The weight scale's tensor name (HF fine-grained FP8: weight_scale_inv)."""
    online: bool = False
    """Dense weights in the checkpoint, quantized at load (per channel)."""
    source: str = ""
    """The format, for messages (e.g. "compressed-tensors")."""

    def describe(self, kind: str) -> str:
        if self.online:
            return f"{kind} W8A8 quantized at load (weights per channel, activations per token)"
        weights = (f"{self.block[0]}x{self.block[1]} blocks" if self.strategy == "block"
                   else f"per {self.strategy}")
        acts = "static per tensor" if self.static_input else (
            "per token and group" if self.strategy == "block" else "dynamic per token")
        return f"{self.source} {kind} W8A8 (weight scales {weights}, activations {acts})"


class _W8A8Method(OpLinearMethod):
    kind: str
    stored_dtype: torch.dtype

    def __init__(self, scheme: W8A8Scheme):
        self.scheme = scheme

    def describe(self) -> str:
        return self.scheme.describe(self.kind)

    def create_params(
        self, layer: nn.Module, input_size: int, output_size: int, dtype: torch.dtype
    ) -> None:
        scheme = self.scheme
        if scheme.online:
            add_param(layer, "weight", torch.empty(output_size, input_size, dtype=dtype))
            return
        add_param(layer, "weight", torch.empty(output_size, input_size, dtype=self.stored_dtype))
        shards = num_shards(layer)
        if scheme.strategy == "tensor":
            add_param(layer, scheme.scale_name, torch.empty(shards), PER_SHARD)
        elif scheme.strategy == "channel":
            add_param(layer, scheme.scale_name, torch.empty(output_size, 1),
                      ParamLayout(output_dim=0, input_dim=None))
        else:
            assert scheme.block is not None
            bn, bk = scheme.block
            rows = shard_rows(layer)
            if shards > 1 and any(r % bn for r in rows):
                raise ValueError(f"layer {layer.prefix}: its fused parts have {rows} rows, not "
                                 f"multiples of the {bn}-row scale blocks of {self.describe()}")
            blocks = (sum(-(-r // bn) for r in rows), -(-input_size // bk))
            add_param(layer, scheme.scale_name, torch.empty(blocks),
                      ParamLayout(output_per=bn, input_per=bk))
        if scheme.static_input:
            add_param(layer, "input_scale", torch.empty(shards), PER_SHARD)

    def input_quantization(self, layer: nn.Module, rows: int) -> torch.dtype | None:
        """Codes of the weights' type, where the op's provider takes them (per token)."""
        return self.stored_dtype if layer.quant_input(layer.qweight, rows) else None

    def _parts(self, layer: nn.Module) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(stored weight, its scales as the canonical form wants, static input scale)."""
        scheme = self.scheme
        scale = getattr(layer, scheme.scale_name).float()
        if scheme.strategy == "tensor":
            scale = per_row(layer, scale)
        elif scheme.strategy == "channel":
            scale = scale.reshape(-1)
        input_scale = layer.input_scale.float().max() if scheme.static_input else None
        return layer.weight.data, scale, input_scale


class Fp8LinearMethod(_W8A8Method):
    name = "fp8"
    kind = "FP8"
    op = "fp8_linear"
    stored_dtype = FP8_DTYPE

    def canonical(self, layer: nn.Module) -> Fp8Weight:
        if self.scheme.online:
            return fp8_weight(layer.weight.data)
        weight, scale, input_scale = self._parts(layer)
        block = self.scheme.block if self.scheme.strategy == "block" else None
        return Fp8Weight(weight, scale, input_scale, block)


class Int8LinearMethod(_W8A8Method):
    name = "int8"
    kind = "INT8"
    op = "int8_linear"
    stored_dtype = torch.int8

    def canonical(self, layer: nn.Module) -> Int8Weight:
        if self.scheme.online:
            return int8_weight(layer.weight.data)
        weight, scale, input_scale = self._parts(layer)
        return Int8Weight(weight, scale, input_scale)
