"""RMSNorm and LayerNorm through the resolved rms_norm / fused_add_rms_norm / layer_norm
ops."""

from __future__ import annotations

import torch
from torch import nn

from pagoda.ops import current_ops
from pagoda.quant.tensors import QuantizedActivation


class RMSNorm(nn.Module):
    """x / rms(x) * weight over the last dim (any leading shape, e.g. per head).

    With `offset` (Gemma) the checkpoint stores w and the norm scales by 1 + w: the weight
    held is 1 + w in float32, computed as the checkpoint tensor loads, so the scale is the
    one HF computes (in float32) whatever the model's dtype.
    """

    def __init__(self, size: int, eps: float, *, dtype: torch.dtype, offset: bool = False):
        super().__init__()
        self.eps = eps
        self.offset = offset
        self.weight = nn.Parameter(
            torch.empty(size, dtype=torch.float32 if offset else dtype), requires_grad=False
        )
        ops = current_ops()
        self.rms_norm_op = ops.rms_norm
        self.fused_add_rms_norm_op = ops.fused_add_rms_norm
        self.quantizing_op = ops.get("fused_add_rms_norm_quant")

    def checkpoint_slice(self, tensor: torch.Tensor, shard: str | None,
                         attr: str) -> torch.Tensor:
        """The weight held for checkpoint tensor `tensor` (1 + w for an offset norm)."""
        return tensor.float() + 1.0 if self.offset else tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rms_norm_op(x, self.weight, self.eps)

    def add_norm(
        self, x: torch.Tensor, residual: torch.Tensor, quantize: torch.dtype | None = None
    ) -> tuple[torch.Tensor | QuantizedActivation, torch.Tensor]:
        """(norm(x + residual), x + residual): the residual stream's add fused with the norm.
        `quantize`: the code type the next linear takes its input in (its
        `input_quantization`); the norm is then handed over quantized per token where the
        platform offers that op, else as it is."""
        if quantize is not None and self.quantizing_op is not None:
            return self.quantizing_op(x, residual, self.weight, self.eps, quantize)
        return self.fused_add_rms_norm_op(x, residual, self.weight, self.eps)


class LayerNorm(nn.Module):
    """(x - mean) / std * weight + bias over the last dim, through the layer_norm op."""

    def __init__(self, size: int, eps: float, *, dtype: torch.dtype, bias: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(size, dtype=dtype), requires_grad=False)
        self.bias = (nn.Parameter(torch.empty(size, dtype=dtype), requires_grad=False)
                     if bias else None)
        self._layer_norm = current_ops().layer_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._layer_norm(x, self.weight, self.bias, self.eps)
