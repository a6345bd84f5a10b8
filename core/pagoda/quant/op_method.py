"""QuantMethods whose layers run through a quantized-linear op (`fp8_linear`,
`int8_linear`, `woq_linear`).

Such a method registers the layer's checkpoint tensors as parameters (their layouts say how
to cut and place them), and after loading builds the canonical weight
(`pagoda.quant.tensors`), hands it to the platform provider's `prepare` and drops the
loading parameters: the layer then holds only what the kernel takes. A platform that does
not offer the op is refused when the layer is built, naming the layer, the scheme and the
platforms that offer it.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn

from pagoda.quant.method import QuantMethod
from pagoda.quant.tensors import QuantizedWeight


class OpLinearMethod(QuantMethod):
    """A linear layer applied by the quantized-linear op `op`."""

    op: ClassVar[str]

    def create_weights(
        self, layer: nn.Module, input_size: int, output_size: int, dtype: torch.dtype
    ) -> None:
        from pagoda.ops import current_ops  # (pagoda.ops' references import pagoda.quant)

        ops = current_ops()
        where = getattr(layer, "prefix", "") or type(layer).__name__
        ops.require(self.op, f"layer {where} ({self.describe()})")
        layer.quant_op = getattr(ops, self.op)
        layer.quant_prepare = ops.prepare[self.op]
        layer.quant_input = ops.quantized_input[self.op]
        layer.linear_op = ops.linear  # for a layer a method keeps dense
        layer.dense_dtype = dtype
        self.create_params(layer, input_size, output_size, dtype)

    @abstractmethod
    def create_params(
        self, layer: nn.Module, input_size: int, output_size: int, dtype: torch.dtype
    ) -> None:
        """Register the parameters the checkpoint fills (with `add_param` and a layout)."""

    @abstractmethod
    def canonical(self, layer: nn.Module) -> QuantizedWeight:
        """The loaded parameters as the op's canonical weight."""

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        weight = self.canonical(layer)
        for name, _ in list(layer.named_parameters(recurse=False)):
            if name != "bias":
                delattr(layer, name)
        layer.qweight = layer.quant_prepare(weight, layer.dense_dtype)

    def apply(
        self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        return layer.quant_op(x, layer.qweight, bias)

    def kernel_call(self, layer: nn.Module) -> tuple[Callable[..., torch.Tensor], Any]:
        return layer.quant_op, layer.qweight


def num_shards(layer: nn.Module) -> int:
    """Checkpoint tensors a layer's weight is stacked from (1 unless merged)."""
    return len(getattr(layer, "shards", None) or (None,))


def shard_rows(layer: nn.Module) -> list[int]:
    """Output rows of each checkpoint shard of the layer (this rank's), in stacking order."""
    shards = getattr(layer, "shards", None)
    return list(shards.values()) if shards else [layer.output_size]


def per_row(layer: nn.Module, per_shard: torch.Tensor) -> torch.Tensor:
    """A value per checkpoint shard ([num_shards]) repeated over each shard's rows: [N]."""
    rows = torch.tensor(shard_rows(layer), device=per_shard.device)
    return per_shard.float().reshape(-1).repeat_interleave(rows)
