"""How a linear layer's parameters line up with its features, so that loading is generic.

A quantized layer holds several tensors per weight (codes, scales, zero points, an input
scale ...), each laid out differently: GPTQ stores codes [K / 8, N], compressed-tensors
[N, K / 8], group scales have one column per group, a per-tensor scale has none. Each
parameter carries a `ParamLayout`; with it the layer cuts a tensor-parallel rank's part out
of any checkpoint tensor and finds where a merged layer's shard goes, whatever the format.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ParamLayout:
    """Where a parameter meets its layer's output (N) and input (K) features."""

    output_dim: int | None = 0
    """The dimension that runs over output features; None: the tensor is not per output."""
    input_dim: int | None = 1
    """The dimension that runs over input features; None: not per input."""
    output_per: int = 1
    """Output features per element along output_dim (codes packed 8 to an int32: 8)."""
    input_per: int = 1
    """Input features per element along input_dim (packed codes, or a group's scale)."""
    per_shard: bool = False
    """One entry per checkpoint tensor of a merged layer (e.g. q, k and v's per-tensor
    scales): the parameter has a leading dimension of one entry per shard, in stacking
    order, and output_dim / input_dim are those of each entry (the checkpoint tensor)."""
    required: bool = True
    """Whether a checkpoint must provide it (False: keeps its initial value if absent)."""

    def along(self, dim: int | None, features: int, what: str) -> int:
        """`features` output (dim == output_dim) or input features as elements of dim."""
        per = self.output_per if dim == self.output_dim else self.input_per
        if features % per:
            raise ValueError(f"cuts {what} at {features} features, not a multiple of the "
                             f"{per} features each stored element covers")
        return features // per


DENSE = ParamLayout()
"""A [N, K] matrix: a dense weight, int8/fp8 codes."""
PER_OUTPUT = ParamLayout(input_dim=None)
"""A vector over the output features: a bias, per-row scales."""
PER_SHARD = ParamLayout(output_dim=None, input_dim=None, per_shard=True)
"""A scalar per checkpoint tensor (per-tensor scales): [num_shards]."""


def layout_of(param: torch.Tensor) -> ParamLayout:
    """A parameter's layout (a dense [N, K] matrix, or a vector over outputs, if unset)."""
    layout = getattr(param, "param_layout", None)
    if layout is not None:
        return layout
    return DENSE if param.dim() == 2 else PER_OUTPUT


def add_param(layer: nn.Module, name: str, tensor: torch.Tensor,
              layout: ParamLayout = DENSE) -> nn.Parameter:
    """Register `tensor` as frozen parameter `name` of `layer`, laid out as `layout`."""
    param = nn.Parameter(tensor, requires_grad=False)
    param.param_layout = layout  # type: ignore[attr-defined]
    layer.register_parameter(name, param)
    return param
