"""Linear layers whose weights are created and applied by a QuantMethod."""

from __future__ import annotations

import torch
from torch import nn

from pagoda.quant import QuantMethod, UnquantizedMethod


class Linear(nn.Module):
    """y = x W^T (+ b); the QuantMethod owns the weight's storage and the matmul."""

    def __init__(
        self,
        input_size: int,
        output_size: int,
        *,
        bias: bool = False,
        dtype: torch.dtype,
        quant_method: QuantMethod | None = None,
    ):
        super().__init__()
        self.input_size = input_size
        self.output_size = output_size
        self.quant_method = quant_method or UnquantizedMethod()
        self.quant_method.create_weights(self, input_size, output_size, dtype)
        if bias:
            self.bias = nn.Parameter(torch.empty(output_size, dtype=dtype), requires_grad=False)
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.quant_method.apply(self, x, self.bias)


class MergedLinear(Linear):
    """Several projections of the same input stored as one matrix, stacked along the output.

    `shards` maps each checkpoint projection name (e.g. "gate_proj") to its output size, in
    stacking order; a checkpoint's separate shard weights load into their rows.
    """

    def __init__(
        self,
        input_size: int,
        shards: dict[str, int],
        *,
        bias: bool = False,
        dtype: torch.dtype,
        quant_method: QuantMethod | None = None,
    ):
        super().__init__(
            input_size, sum(shards.values()), bias=bias, dtype=dtype, quant_method=quant_method
        )
        self.shards = dict(shards)

    def shard_rows(self, shard: str) -> tuple[int, int]:
        """(first output row, number of rows) of `shard`."""
        offset = 0
        for name, size in self.shards.items():
            if name == shard:
                return offset, size
            offset += size
        raise KeyError(f"{shard!r} is not a shard of this layer (shards: {list(self.shards)})")

    def shard_view(self, param: torch.Tensor, shard: str) -> torch.Tensor:
        """The rows of `param` (this layer's weight or bias) that `shard` loads into."""
        offset, size = self.shard_rows(shard)
        return param.narrow(0, offset, size)

    def split(self, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """This layer's output [..., sum(sizes)] cut into the shards' outputs (views)."""
        return y.split(list(self.shards.values()), dim=-1)


class QKVLinear(MergedLinear):
    """The fused query/key/value projection (checkpoint shards q_proj, k_proj, v_proj)."""

    def __init__(
        self,
        hidden_size: int,
        head_size: int,
        num_heads: int,
        num_kv_heads: int,
        *,
        bias: bool = False,
        dtype: torch.dtype,
        quant_method: QuantMethod | None = None,
    ):
        shards = {
            "q_proj": num_heads * head_size,
            "k_proj": num_kv_heads * head_size,
            "v_proj": num_kv_heads * head_size,
        }
        super().__init__(hidden_size, shards, bias=bias, dtype=dtype, quant_method=quant_method)
