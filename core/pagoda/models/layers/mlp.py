"""The gated SiLU feed-forward block (Llama-style MLP)."""

from __future__ import annotations

import torch
from torch import nn

from pagoda.models.layers.linear import MergedColumnParallelLinear, RowParallelLinear
from pagoda.ops import current_ops
from pagoda.quant import QuantMethod


class SiluMLP(nn.Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x)), with gate and up fused in one matmul;
    the intermediate features split over the tensor-parallel ranks."""

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        *,
        bias: bool = False,
        dtype: torch.dtype,
        quant_method: QuantMethod | None = None,
        prefix: str = "",
    ):
        super().__init__()
        prefix = f"{prefix}." if prefix else ""
        self.gate_up_proj = MergedColumnParallelLinear(
            hidden_size,
            {"gate_proj": intermediate_size, "up_proj": intermediate_size},
            bias=bias,
            dtype=dtype,
            quant_method=quant_method,
            prefix=f"{prefix}gate_up_proj",
        )
        self.down_proj = RowParallelLinear(
            intermediate_size, hidden_size, bias=bias, dtype=dtype, quant_method=quant_method,
            prefix=f"{prefix}down_proj",
        )
        self._silu_and_mul = current_ops().silu_and_mul

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self._silu_and_mul(self.gate_up_proj(x)))
