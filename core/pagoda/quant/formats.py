"""The checkpoint formats named by `quant_method` besides compressed-tensors (FP8, GPTQ,
AWQ), and quantization at load of a dense checkpoint (`--quantization fp8|int8|int4`).

Each builds the layer methods of `pagoda.quant.w8a8` and `pagoda.quant.woq`; a layer the
config leaves out (`modules_to_not_convert`, `ignored_layers`; the LM head is never a
quantized linear here) stays dense.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pagoda.quant.layout import add_param
from pagoda.quant.matching import listed, one_answer
from pagoda.quant.method import QuantMethod
from pagoda.quant.op_method import OpLinearMethod
from pagoda.quant.rtn import group_weight
from pagoda.quant.tensors import GroupQuantWeight
from pagoda.quant.unquantized import UnquantizedMethod
from pagoda.quant.w8a8 import Fp8LinearMethod, Int8LinearMethod, W8A8Scheme
from pagoda.quant.woq import WoqLinearMethod, WoqScheme


class UnsupportedConfig(ValueError):
    pass


class _LayerwiseMethod(QuantMethod):
    """A checkpoint method that quantizes every linear layer alike except those listed."""

    def __init__(self, layer_method: QuantMethod, skipped: list[str]):
        self.layer_method = layer_method
        self.skipped = skipped

    def describe(self) -> str:
        return self.layer_method.describe()

    def for_layer(self, layer: nn.Module) -> QuantMethod:
        names = layer.checkpoint_names
        skipped = one_answer(layer.prefix, names, [listed(n, self.skipped) for n in names])
        return UnquantizedMethod() if skipped else self.layer_method


def _skipped(config: dict[str, Any]) -> list[str]:
    return list(config.get("modules_to_not_convert") or config.get("ignored_layers") or ())


class Fp8Method(_LayerwiseMethod):
    """quant_method "fp8": HF's fine-grained FP8 (`weight_block_size`, `weight_scale_inv`)
    or per-tensor FP8 (`weight_scale`, and `input_scale` when activation_scheme is
    static); with no quantization config, the dense checkpoint is quantized at load."""

    name = "fp8"

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Fp8Method:
        if not config:
            return cls(Fp8LinearMethod(W8A8Scheme(online=True)), [])
        activations = config.get("activation_scheme", "dynamic")
        if activations not in ("dynamic", "static"):
            raise UnsupportedConfig(f"fp8 activation_scheme {activations!r} is not supported "
                                    f"(dynamic, static)")
        block = config.get("weight_block_size")
        if block is not None:
            if activations != "dynamic" or len(block) != 2:
                raise UnsupportedConfig(f"fp8 weight_block_size {block} with {activations} "
                                        f"activations is not supported")
            scheme = W8A8Scheme("block", tuple(block), scale_name="weight_scale_inv",
                                source="fp8")
        else:
            scheme = W8A8Scheme("tensor", static_input=activations == "static", source="fp8")
        method = cls(Fp8LinearMethod(scheme), _skipped(config))
        method.checkpoint_format = "hf"  # serialized FP8 tensors (quantized at load: any)
        return method


class GptqMethod(_LayerwiseMethod):
    """quant_method "gptq" (AutoGPTQ / GPTQModel layout)."""

    name = "gptq"
    checkpoint_format = "hf"

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> GptqMethod:
        fmt = config.get("checkpoint_format", "gptq")
        if fmt not in ("gptq", "gptq_v2"):
            raise UnsupportedConfig(f"gptq checkpoint_format {fmt!r} is not supported "
                                    f"(gptq, gptq_v2)")
        group = config.get("group_size", 128)
        scheme = WoqScheme("gptq", bits=int(config.get("bits", 4)),
                           group_size=None if group in (-1, None) else int(group),
                           act_order=bool(config.get("desc_act", False)),
                           zero_plus_one=fmt == "gptq")
        return cls(WoqLinearMethod(scheme), _skipped(config))


class AwqMethod(_LayerwiseMethod):
    """quant_method "awq", GEMM layout."""

    name = "awq"
    checkpoint_format = "hf"

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> AwqMethod:
        version = str(config.get("version", "gemm")).lower()
        if version != "gemm":
            raise UnsupportedConfig(f"awq version {version!r} is not supported (gemm)")
        if not config.get("zero_point", True):
            raise UnsupportedConfig("awq without zero points is not supported")
        group = config.get("group_size", config.get("q_group_size", 128))
        scheme = WoqScheme("awq", bits=int(config.get("bits", config.get("w_bit", 4))),
                           group_size=None if group in (-1, None) else int(group))
        return cls(WoqLinearMethod(scheme), _skipped(config))


class OnlineInt4Method(OpLinearMethod):
    """Dense weights quantized at load to 4 bits per group of 128 inputs (64 or 32 where
    128 does not divide them), symmetric, round to nearest: no calibration, so expect more
    loss than GPTQ or AWQ at the same size."""

    name = "int4"
    op = "woq_linear"

    def describe(self) -> str:
        return "INT4 W4A16 quantized at load (groups of 128, symmetric, round to nearest)"

    def create_params(
        self, layer: nn.Module, input_size: int, output_size: int, dtype: torch.dtype
    ) -> None:
        if not any(input_size % g == 0 for g in (128, 64, 32)):
            raise ValueError(f"layer {layer.prefix}: {input_size} inputs are not groups of "
                             f"32, 64 or 128 ({self.describe()})")
        add_param(layer, "weight", torch.empty(output_size, input_size, dtype=dtype))

    def canonical(self, layer: nn.Module) -> GroupQuantWeight:
        k = layer.weight.shape[1]
        group = next(g for g in (128, 64, 32) if k % g == 0)
        return group_weight(layer.weight.data, 4, group, symmetric=True)


class Int8Method(_LayerwiseMethod):
    """`--quantization int8` on a dense checkpoint: INT8 W8A8 quantized at load."""

    name = "int8"

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Int8Method:
        return cls(Int8LinearMethod(W8A8Scheme(online=True)), [])


class Int4Method(_LayerwiseMethod):
    """`--quantization int4` on a dense checkpoint: W4A16 quantized at load."""

    name = "int4"

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Int4Method:
        return cls(OnlineInt4Method(), [])
