"""The QuantMethod interface: a per-layer strategy for linear weights."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch
from torch import nn

from pagoda.quant.checkpoint import CheckpointTensor, copy_weight, dense


class QuantMethod(ABC):
    """How a linear layer stores, loads and applies its weights.

    Lifecycle: `from_config` reads the checkpoint's quantization config; for each linear
    layer `create_weights` registers its parameters (at least `weight`) and `load_weight`
    fills them from the checkpoint; after the checkpoint is loaded
    `process_weights_after_loading` may repack them for the kernel; `apply` computes the
    layer's output. One instance serves every layer: per-layer state lives on the layer.
    """

    name: ClassVar[str]
    checkpoint_format: ClassVar[str | None] = None
    """The checkpoint format whose quantized tensors this method loads as stored (e.g.
    "gguf"); None: it takes dense weights from any format, dummy ones included."""

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> QuantMethod:
        """Build from the checkpoint's quantization config (HF `quantization_config`)."""
        return cls()

    @abstractmethod
    def create_weights(
        self, layer: nn.Module, input_size: int, output_size: int, dtype: torch.dtype
    ) -> None:
        """Register the layer's weight parameters (at least `weight`)."""

    def load_weight(
        self, layer: nn.Module, loaded: CheckpointTensor, shard: str | None, name: str
    ) -> None:
        """Load checkpoint tensor `name` into the layer's weight (`shard`'s rows if merged).

        The default copies its dense values into `layer.weight`.
        """
        param = layer.weight if shard is None else layer.shard_view(layer.weight, shard)
        copy_weight(param, dense(loaded), name)

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        """Repack loaded weights for the kernel; the default keeps them as loaded."""

    @abstractmethod
    def apply(
        self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        """y = x @ W^T (+ bias) with this method's weights."""
