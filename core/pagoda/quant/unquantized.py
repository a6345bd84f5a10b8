"""Plain dense weights in the model dtype."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.quant.method import QuantMethod


class UnquantizedMethod(QuantMethod):
    name = "none"

    def create_weights(
        self, layer: nn.Module, input_size: int, output_size: int, dtype: torch.dtype
    ) -> None:
        weight = torch.empty(output_size, input_size, dtype=dtype)
        layer.register_parameter("weight", nn.Parameter(weight, requires_grad=False))

    def apply(
        self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        return F.linear(x, layer.weight, bias)
