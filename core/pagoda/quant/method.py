"""The QuantMethod interface: a per-layer strategy for linear weights."""

from __future__ import annotations

from abc import ABC
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn

from pagoda.quant.checkpoint import CheckpointTensor, copy_weight, dense
from pagoda.quant.layout import layout_of


class QuantMethod(ABC):
    """How a linear layer stores, loads and applies its weights.

    Lifecycle: `from_config` reads the checkpoint's quantization config (HF
    `quantization_config`; {} when there is none) into the method for the whole model;
    each linear layer asks it `for_layer(layer)` for its own method (a checkpoint may
    quantize some layers only, or layers differently), whose `create_weights` registers the
    layer's parameters (each with a `ParamLayout`, see `pagoda.quant.layout`) and
    `load_weight` fills them from the checkpoint; after loading,
    `process_weights_after_loading` turns them into what the kernel takes; `apply` computes
    the layer's output. Per-layer state lives on the layer.
    """

    name: ClassVar[str]
    checkpoint_format: ClassVar[str | None] = None
    """The checkpoint format whose quantized tensors this method loads as stored (e.g.
    "gguf"); None: it takes any format, dummy weights included."""

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> QuantMethod:
        """Build from the checkpoint's quantization config (HF `quantization_config`)."""
        return cls()

    def for_layer(self, layer: nn.Module) -> QuantMethod:
        """The method of one linear layer: `layer.prefix` is its module name, and
        `layer.checkpoint_names` the checkpoint modules whose weights it holds (q_proj,
        k_proj and v_proj for a fused qkv_proj). The default: this method for every layer.
        """
        return self

    def describe(self) -> str:
        """What this method does, for logs and errors (e.g. the scheme's parameters)."""
        return self.name

    def create_weights(
        self, layer: nn.Module, input_size: int, output_size: int, dtype: torch.dtype
    ) -> None:
        """Register the layer's parameters (this rank's part: input_size x output_size)."""
        raise NotImplementedError(f"{type(self).__name__} gives each layer a method of its "
                                  f"own (for_layer); it has no weights itself")

    def load_weight(
        self, layer: nn.Module, attr: str, loaded: CheckpointTensor, shard: str | None,
        name: str,
    ) -> None:
        """Copy checkpoint tensor `name` (already cut to this rank's part) into parameter
        `attr` of the layer (`shard`'s place in it for a merged layer)."""
        param = getattr(layer, attr)
        dest = param if shard is None else layer.shard_view(param, shard)
        value = dense(loaded)
        if layout_of(param).per_shard and value.numel() == dest.numel():
            value = value.reshape(dest.shape)  # a per-tensor scalar stored as [] or [1]
        copy_weight(dest, value, name)

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        """Turn loaded weights into the kernel's form; the default keeps them as loaded."""

    def apply(
        self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        """y = x @ W^T (+ bias) with this method's weights."""
        raise NotImplementedError(f"{type(self).__name__} gives each layer a method of its own")

    def input_quantization(self, layer: nn.Module, rows: int) -> torch.dtype | None:
        """The code type (float8 e4m3 or int8) in which `apply` takes an input of `rows`
        rows already quantized per token (a `pagoda.quant.tensors.QuantizedActivation`, from
        the op before the layer), or None: in the model's dtype (the default)."""
        return None

    def kernel_call(self, layer: nn.Module) -> tuple[Callable[..., torch.Tensor], Any] | None:
        """(op, weight) where `apply(layer, x, bias)` is exactly `op(x, weight, bias)` (one
        call of a resolved op), for a platform that fuses the layer with its neighbours
        (`Platform.fuse_decode_layer`); None where apply does more (the default)."""
        return None
