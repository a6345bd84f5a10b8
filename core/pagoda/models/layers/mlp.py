"""The gated feed-forward block (Llama-style MLP) with its activation."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import nn

from pagoda.models.layers.linear import MergedColumnParallelLinear, RowParallelLinear
from pagoda.ops import current_ops
from pagoda.quant import QuantMethod
from pagoda.quant.tensors import QuantizedActivation

GATE_ACTIVATIONS = {"silu": None, "gelu": "none", "gelu_pytorch_tanh": "tanh"}
"""The gate activations implemented, by their HF name (`hidden_act`): SiLU, or GELU with
its `approximate` (exact erf, or the tanh approximation)."""


def gated_activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """act(x[..., :d]) * x[..., d:] for HF activation `name`, from the current op table."""
    ops = current_ops()
    if name == "silu":
        return ops.silu_and_mul
    return functools.partial(ops.gelu_and_mul, approximate=GATE_ACTIVATIONS[name])


class GatedMLP(nn.Module):
    """down_proj(act(gate_proj(x)) * up_proj(x)), with gate and up fused in one matmul;
    the intermediate features split over the tensor-parallel ranks. `fused_checkpoint`:
    the checkpoint stores gate and up as one `gate_up_proj` (Phi-3)."""

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        *,
        activation: str = "silu",
        bias: bool = False,
        dtype: torch.dtype,
        quant_method: QuantMethod | None = None,
        prefix: str = "",
        fused_checkpoint: bool = False,
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
            fused_checkpoint=fused_checkpoint,
        )
        self.down_proj = RowParallelLinear(
            intermediate_size, hidden_size, bias=bias, dtype=dtype, quant_method=quant_method,
            prefix=f"{prefix}down_proj",
        )
        self.act_and_mul_op = gated_activation(activation)
        self.quantizing_op = (current_ops().get("silu_and_mul_quant")
                              if activation == "silu" else None)
        """silu_and_mul with its output quantized per token, where the platform offers it."""

    def input_quantization(self, rows: int) -> torch.dtype | None:
        """The code type in which the block takes `rows` rows of input already quantized per
        token (`Linear.input_quantization` of gate_up_proj), or None."""
        return self.gate_up_proj.input_quantization(rows)

    def forward(self, x: torch.Tensor | QuantizedActivation) -> torch.Tensor:
        gate_up = self.gate_up_proj(x)
        rows = gate_up.shape[:-1].numel()
        quantize = self.down_proj.input_quantization(rows) if self.quantizing_op else None
        if quantize is not None:  # down_proj's input handed over quantized
            return self.down_proj(self.quantizing_op(gate_up, quantize))
        return self.down_proj(self.act_and_mul_op(gate_up))
