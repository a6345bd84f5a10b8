"""Linear layers whose weights are created and applied by a QuantMethod, whole on every
rank (`Linear`) or split over the tensor-parallel ranks.

A column-parallel layer holds a block of the output features (its weight's rows) and
gives its block of y; a row-parallel one holds a block of the input features (its
weight's columns), takes the matching block of x and all-reduces the partial products.
A column-parallel layer followed by a row-parallel one (attention's qkv and o, the MLP's
gate/up and down) needs one all-reduce between them. Each layer cuts the checkpoint's
whole tensors to its part as they load (`checkpoint_slice`), whatever the tensor's layout
(codes packed along either dimension, group scales, per-tensor scales: its parameter's
`ParamLayout` says which dimension holds which features).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from pagoda.distributed import AttentionHeads, shard_range, tp_group
from pagoda.ops import current_ops
from pagoda.quant import QuantMethod, UnquantizedMethod
from pagoda.quant.checkpoint import CheckpointTensor, narrow
from pagoda.quant.layout import PER_OUTPUT, ParamLayout, add_param, layout_of
from pagoda.quant.tensors import QuantizedActivation

if TYPE_CHECKING:
    from pagoda.lora.layers import LoRASlots


def _part(tensor: CheckpointTensor, layout: ParamLayout, dim: int | None, whole: int,
          start: int, length: int) -> CheckpointTensor:
    """Features start..start+length (of `whole`) along `dim` of a checkpoint tensor laid out
    as `layout` (dim None: the tensor does not run over those features, it is whole)."""
    if dim is None:
        return tensor
    whole, start, length = (layout.along(dim, n, "the tensor-parallel split")
                            for n in (whole, start, length))
    if tensor.shape[dim] != whole:
        raise ValueError(f"has shape {tuple(tensor.shape)}, the model expects {whole} along "
                         f"dimension {dim} (before the tensor-parallel split)")
    return narrow(tensor, dim, start, length)


class Linear(nn.Module):
    """y = x W^T (+ b) with the whole weight on every rank; the QuantMethod owns the
    weight's storage and the matmul."""

    def __init__(
        self,
        input_size: int,
        output_size: int,
        *,
        bias: bool = False,
        dtype: torch.dtype,
        quant_method: QuantMethod | None = None,
        prefix: str = "",
    ):
        super().__init__()
        self.tp = tp_group()
        self.prefix = prefix
        self.lora: LoRASlots | None = None
        """The LoRA adapters' slots of this layer (`pagoda.lora`), where LoRA is on."""
        self.input_size, self.output_size = self._local_sizes(input_size, output_size)
        self.quant_method = (quant_method or UnquantizedMethod()).for_layer(self)
        self.quant_method.create_weights(self, self.input_size, self.output_size, dtype)
        if bias:
            layout = PER_OUTPUT if self._shards_bias else ParamLayout(None, None)
            bias_size = self.output_size if self._shards_bias else output_size
            add_param(self, "bias", torch.empty(bias_size, dtype=dtype), layout)
        else:
            self.register_parameter("bias", None)

    _shards_bias = True
    """Whether the bias is split like the output features."""
    splits_input = False
    """Whether the ranks each hold a block of the input features (row parallel)."""

    @property
    def checkpoint_names(self) -> tuple[str, ...]:
        """The checkpoint modules whose weights this layer holds (its own name, or its
        shards' for a merged layer)."""
        return (self.prefix,)

    def _local_sizes(self, input_size: int, output_size: int) -> tuple[int, int]:
        """(input, output) features this rank holds."""
        return input_size, output_size

    def checkpoint_slice(self, tensor: CheckpointTensor, shard: str | None,
                         attr: str) -> CheckpointTensor:
        """This rank's part of a whole checkpoint tensor of parameter `attr`."""
        return tensor

    def load_checkpoint_tensor(self, attr: str, tensor: CheckpointTensor, shard: str | None,
                               name: str) -> None:
        """Load checkpoint tensor `name` (whole) into parameter `attr`: this rank's part,
        in `shard`'s place for a merged layer, through the quant method."""
        try:
            part = self.checkpoint_slice(tensor, shard, attr)
        except ValueError as exc:
            raise ValueError(f"Weight {name!r} {exc}") from None
        self.quant_method.load_weight(self, attr, part, shard, name)

    def input_quantization(self, rows: int) -> torch.dtype | None:
        """The code type (float8 e4m3 or int8) in which the layer takes an input of `rows`
        rows already quantized per token (a `QuantizedActivation`), or None: in the model's
        dtype, as always while LoRA adapts the layer (its adapters multiply x itself)."""
        return None if self.lora is not None else self.quant_method.input_quantization(self,
                                                                                      rows)

    def forward(self, x: torch.Tensor | QuantizedActivation) -> torch.Tensor:
        y = self.quant_method.apply(self, x, self.bias)
        return y if self.lora is None else self.lora(x, y)


class ColumnParallelLinear(Linear):
    """Output features split over the ranks: each computes its block of y."""

    def _local_sizes(self, input_size: int, output_size: int) -> tuple[int, int]:
        return input_size, shard_range(output_size, self.tp.rank, self.tp.world_size)[1]

    def output_part(self, shard: str | None) -> tuple[int, int, int]:
        """(whole, first, count): the output features of `shard` (None: the layer's) in
        the whole model, and which of them this rank holds."""
        rows = self.output_size
        return rows * self.tp.world_size, self.tp.rank * rows, rows

    def checkpoint_slice(self, tensor: CheckpointTensor, shard: str | None,
                         attr: str) -> CheckpointTensor:
        if self.tp.world_size == 1:
            return tensor
        layout = layout_of(getattr(self, attr))
        return _part(tensor, layout, layout.output_dim, *self.output_part(shard))


class RowParallelLinear(Linear):
    """Input features split over the ranks: y = all_reduce(x_r W_r^T) (+ b)."""

    _shards_bias = False
    splits_input = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._all_reduce = current_ops().all_reduce

    def _local_sizes(self, input_size: int, output_size: int) -> tuple[int, int]:
        return shard_range(input_size, self.tp.rank, self.tp.world_size)[1], output_size

    def input_part(self) -> tuple[int, int, int]:
        """(whole, first, count): the input features of the whole model, and which of
        them this rank holds."""
        cols = self.input_size
        return cols * self.tp.world_size, self.tp.rank * cols, cols

    def checkpoint_slice(self, tensor: CheckpointTensor, shard: str | None,
                         attr: str) -> CheckpointTensor:
        if self.tp.world_size == 1:
            return tensor
        layout = layout_of(getattr(self, attr))
        return _part(tensor, layout, layout.input_dim, *self.input_part())

    def forward(self, x: torch.Tensor | QuantizedActivation) -> torch.Tensor:
        if self.tp.world_size == 1:
            return super().forward(x)
        # An adapter's delta is linear in x too: each rank adds its block's share before
        # the one all-reduce (sum over ranks of x_r A_r^T B^T = x A^T B^T).
        y = self.quant_method.apply(self, x)
        if self.lora is not None:
            y = self.lora(x, y)
        y = self._all_reduce(y, self.tp.group)
        return y if self.bias is None else y + self.bias


class MergedColumnParallelLinear(ColumnParallelLinear):
    """Several column-parallel projections of the same input stored as one matrix, stacked
    along the output.

    `shards` maps each checkpoint projection name (e.g. "gate_proj") to its output size in
    the whole model, in stacking order; each rank holds its block of every shard, and a
    checkpoint's separate shard weights load into their rows. With `fused_checkpoint` the
    checkpoint stores the shards stacked as one tensor under this layer's own name (Phi-3's
    qkv_proj, gate_up_proj): each tensor is cut into the shards' parts as it loads.
    """

    def __init__(
        self,
        input_size: int,
        shards: dict[str, int],
        *,
        bias: bool = False,
        dtype: torch.dtype,
        quant_method: QuantMethod | None = None,
        prefix: str = "",
        fused_checkpoint: bool = False,
    ):
        self.whole_shards = dict(shards)
        self.shards = self._local_shards(shards)
        self.fused_checkpoint = fused_checkpoint
        super().__init__(input_size, sum(shards.values()), bias=bias, dtype=dtype,
                         quant_method=quant_method, prefix=prefix)

    @property
    def checkpoint_names(self) -> tuple[str, ...]:
        if self.fused_checkpoint:
            return (self.prefix,)
        parent = self.prefix.rpartition(".")[0]
        return tuple(f"{parent}.{shard}" if parent else shard for shard in self.shards)

    def load_checkpoint_tensor(self, attr: str, tensor: CheckpointTensor, shard: str | None,
                               name: str) -> None:
        """A fused checkpoint's tensor (shard None) loads as its shards' parts, each as if
        the checkpoint held it separately (so each is cut for this rank as usual)."""
        if shard is not None or not self.fused_checkpoint:
            super().load_checkpoint_tensor(attr, tensor, shard, name)
            return
        layout = layout_of(getattr(self, attr))
        dim, offset = layout.output_dim, 0
        if dim is not None and not layout.per_shard:
            total = layout.along(dim, sum(self.whole_shards.values()), "the fused shards")
            if tensor.shape[dim] != total:
                raise ValueError(f"Weight {name!r} has shape {tuple(tensor.shape)}, the model "
                                 f"expects {total} along dimension {dim} (the stacked "
                                 f"{', '.join(self.whole_shards)})")
        for part_name, size in self.whole_shards.items():
            if layout.per_shard:  # one value for the fused matrix: every part's
                part = tensor
            elif dim is None:
                raise ValueError(f"Weight {name!r} is not per output feature: it cannot be "
                                 f"cut into {', '.join(self.whole_shards)}")
            else:
                what = f"shard {part_name!r}"
                part = narrow(tensor, dim, layout.along(dim, offset, what),
                              layout.along(dim, size, what))
                offset += size
            super().load_checkpoint_tensor(attr, part, part_name, name)

    def _local_shards(self, shards: dict[str, int]) -> dict[str, int]:
        world = tp_group().world_size
        return {name: shard_range(size, 0, world)[1] for name, size in shards.items()}

    def _local_sizes(self, input_size: int, output_size: int) -> tuple[int, int]:
        return input_size, sum(self.shards.values())

    def output_part(self, shard: str | None) -> tuple[int, int, int]:
        assert shard is not None, "a merged layer's features are its shards'"
        rows = self.shards[shard]
        return rows * self.tp.world_size, self.tp.rank * rows, rows

    def checkpoint_slice(self, tensor: CheckpointTensor, shard: str | None,
                         attr: str) -> CheckpointTensor:
        assert shard is not None, "a merged layer loads its shards' weights"
        return super().checkpoint_slice(tensor, shard, attr)

    def shard_rows(self, shard: str) -> tuple[int, int]:
        """(first output row, number of rows) of `shard` in this rank's weight."""
        offset = 0
        for name, size in self.shards.items():
            if name == shard:
                return offset, size
            offset += size
        raise KeyError(f"{shard!r} is not a shard of this layer (shards: {list(self.shards)})")

    def shard_view(self, param: torch.Tensor, shard: str) -> torch.Tensor:
        """The part of `param` (a parameter of this layer) that `shard` loads into: its
        rows, wherever its layout keeps the output features, or its entry if per shard."""
        layout = layout_of(param)
        if layout.per_shard:
            return param[list(self.shards).index(shard)]
        if layout.output_dim is None:
            raise ValueError(f"parameter of shape {tuple(param.shape)} is not per output "
                             f"feature: shard {shard!r} has no place of its own in it")
        offset, size = self.shard_rows(shard)
        what = f"shard {shard!r}"
        return param.narrow(layout.output_dim, layout.along(layout.output_dim, offset, what),
                            layout.along(layout.output_dim, size, what))

    def split(self, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """This layer's output [..., sum(sizes)] cut into the shards' outputs (views)."""
        return y.split(list(self.shards.values()), dim=-1)


class QKVParallelLinear(MergedColumnParallelLinear):
    """The fused query/key/value projection (checkpoint shards q_proj, k_proj, v_proj),
    holding this rank's attention heads (`AttentionHeads`: key/value heads replicated when
    there are fewer than ranks)."""

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
        prefix: str = "",
        fused_checkpoint: bool = False,
    ):
        tp = tp_group()
        self.heads = AttentionHeads(num_heads, num_kv_heads, tp.rank, tp.world_size)
        self.head_size = head_size
        shards = {
            "q_proj": num_heads * head_size,
            "k_proj": num_kv_heads * head_size,
            "v_proj": num_kv_heads * head_size,
        }
        super().__init__(hidden_size, shards, bias=bias, dtype=dtype, quant_method=quant_method,
                         prefix=prefix, fused_checkpoint=fused_checkpoint)

    def _local_shards(self, shards: dict[str, int]) -> dict[str, int]:
        kv = self.heads.local_kv_heads * self.head_size
        return {"q_proj": self.heads.local_heads * self.head_size, "k_proj": kv, "v_proj": kv}

    def output_part(self, shard: str | None) -> tuple[int, int, int]:
        heads = self.heads
        if shard == "q_proj":
            whole, first = heads.num_heads, heads.rank * heads.local_heads
        else:
            whole, first = heads.num_kv_heads, heads.first_kv_head
        return whole * self.head_size, first * self.head_size, self.shards[shard]  # type: ignore[index]
