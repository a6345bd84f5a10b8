"""GGUF weights kept quantized: Q4_0, Q4_1 and Q8_0 linear weights stay codes with a scale
and offset per block of 32 and run through `woq_linear` on any platform that offers it.

"gguf" multiplies the activations as they are (the dequantized weights' products, as
transformers computes them); "gguf_a8" rounds them to int8 per block of 32 first, as
llama.cpp does (`GroupQuantWeight.act_block`): its numerics, and on the CPU one-row
products ~1.3-1.6x faster, summed in integers (`pagoda_cpu`'s woq_q8.inc).

A layer learns its weight's block type as it loads (the file decides, tensor by tensor): a
layer whose tensors are all Q4 or all Q8_0 stays quantized; one with another type (Q6_K,
F16 ...) in any part is dequantized to the model dtype, and the log counts those layers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from pagoda.quant.checkpoint import CheckpointTensor, copy_weight
from pagoda.quant.layout import ParamLayout, add_param
from pagoda.quant.op_method import OpLinearMethod
from pagoda.quant.tensors import GroupQuantWeight

logger = logging.getLogger(__name__)

BLOCK = 32


class GGUFMethod(OpLinearMethod):
    name = "gguf"
    checkpoint_format = "gguf"
    op = "woq_linear"
    act_block: int | None = None
    """The kept weights' `GroupQuantWeight.act_block`: None, activations as they are."""

    def describe(self) -> str:
        return "GGUF Q4_0/Q4_1/Q8_0 kept quantized (blocks of 32)"

    def create_params(
        self, layer: nn.Module, input_size: int, output_size: int, dtype: torch.dtype
    ) -> None:
        layer.gguf_bits = set()
        if input_size % BLOCK:
            layer.gguf_bits.add("dense")
            add_param(layer, "weight", torch.empty(output_size, input_size, dtype=dtype))
            return
        groups = input_size // BLOCK
        add_param(layer, "weight", torch.empty(output_size, input_size, dtype=torch.uint8))
        # Filled from the checkpoint's "weight" (a GroupQuantWeight), not tensors of their own.
        part_of_weight = ParamLayout(input_per=BLOCK, required=False)
        add_param(layer, "weight_scale", torch.empty(output_size, groups), part_of_weight)
        add_param(layer, "weight_offset", torch.empty(output_size, groups), part_of_weight)

    def load_weight(
        self, layer: nn.Module, attr: str, loaded: CheckpointTensor, shard: str | None,
        name: str,
    ) -> None:
        if attr != "weight":
            return super().load_weight(layer, attr, loaded, shard, name)
        if (isinstance(loaded, GroupQuantWeight) and loaded.group_size == BLOCK
                and "dense" not in layer.gguf_bits):
            layer.gguf_bits.add(loaded.bits)
            parts = (layer.weight, layer.weight_scale, layer.weight_offset)
            for param, part in zip(parts, (loaded.codes, loaded.scales, loaded.offsets),
                                   strict=True):
                copy_weight(param if shard is None else layer.shard_view(param, shard),
                            part, name)
            return
        if "dense" not in layer.gguf_bits:
            _make_dense(layer)
        super().load_weight(layer, attr, loaded, shard, name)

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        bits = layer.gguf_bits
        if len(bits - {"dense"}) > 1:  # Q4 and Q8_0 parts in one fused layer
            _make_dense(layer)
        if "dense" in layer.gguf_bits:
            logger.info("GGUF layer %s is not Q4_0/Q4_1/Q8_0 throughout: dequantized to %s",
                        layer.prefix, layer.dense_dtype)
            layer.qweight = None
            return
        weight = GroupQuantWeight(layer.weight.data, layer.weight_scale.data,
                                  layer.weight_offset.data, bits=next(iter(bits)),
                                  act_block=self.act_block)
        del layer.weight, layer.weight_scale, layer.weight_offset
        layer.qweight = layer.quant_prepare(weight, layer.dense_dtype)

    def apply(
        self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        if layer.qweight is None:
            return layer.linear_op(x, layer.weight, bias)
        return layer.quant_op(x, layer.qweight, bias)

    def kernel_call(self, layer: nn.Module) -> tuple[Callable[..., torch.Tensor], Any]:
        if layer.qweight is None:
            return layer.linear_op, layer.weight
        return layer.quant_op, layer.qweight

    def canonical(self, layer: nn.Module) -> GroupQuantWeight:  # pragma: no cover
        raise AssertionError("GGUF layers build their weight in process_weights_after_loading")


class GGUFA8Method(GGUFMethod):
    """GGUF weights kept quantized, their activations rounded to int8 blocks of 32 (W4A8 /
    W8A8 as llama.cpp computes them)."""

    name = "gguf_a8"
    act_block = BLOCK

    def describe(self) -> str:
        return ("GGUF Q4_0/Q4_1/Q8_0 kept quantized (blocks of 32), activations rounded to "
                "int8 blocks of 32 as llama.cpp rounds them")


def _make_dense(layer: nn.Module) -> None:
    """Turn a loading layer dense, keeping the rows of the parts loaded so far."""
    bits = max((b for b in layer.gguf_bits if b != "dense"), default=4)
    if hasattr(layer, "weight_scale"):
        codes = GroupQuantWeight(layer.weight.data, layer.weight_scale.data,
                                 layer.weight_offset.data, bits)
        del layer.weight, layer.weight_scale, layer.weight_offset
        add_param(layer, "weight", codes.dequantize().to(layer.dense_dtype))
    layer.gguf_bits = {"dense"}
