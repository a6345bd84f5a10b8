"""Plain dense weights in the model dtype, applied by the resolved `linear` op."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from pagoda.quant.layout import add_param
from pagoda.quant.method import QuantMethod


class UnquantizedMethod(QuantMethod):
    name = "none"

    def create_weights(
        self, layer: nn.Module, input_size: int, output_size: int, dtype: torch.dtype
    ) -> None:
        from pagoda.ops import current_ops  # (pagoda.ops' references import pagoda.quant)

        add_param(layer, "weight", torch.empty(output_size, input_size, dtype=dtype))
        # Bound now, as the layer is built under the platform's op table (`use_ops`).
        layer.linear_op = current_ops().linear

    def apply(
        self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        return layer.linear_op(x, layer.weight, bias)

    def kernel_call(self, layer: nn.Module) -> tuple[Callable[..., torch.Tensor], Any]:
        return layer.linear_op, layer.weight
