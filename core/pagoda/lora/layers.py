"""A linear layer's LoRA slots: each slot holds one adapter's A and B for this layer (this
rank's part of them), and each token of a step applies its own slot's, or none.

A layer merged from several checkpoint projections (qkv, gate/up) stacks one adapter's
parts along the rank: A [S, parts x R, K] and a block-diagonal B [S, parts x R, N] (part i's
rows of B^T feed only part i's output features), so one shrink and one expand serve every
part. Under tensor parallelism a column-parallel layer holds its block of B's output
features; a row-parallel one its block of A's input features, its delta summed by the
layer's all-reduce (`RowParallelLinear.forward`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pagoda.models.layers.linear import (
    ColumnParallelLinear,
    Linear,
    MergedColumnParallelLinear,
    RowParallelLinear,
)
from pagoda.ops import current_ops


@dataclass
class TokenSlots:
    """Each token's slot (-1: none) in a step, in fixed device buffers as long as the
    longest step, shared by every layer (decode graphs capture their addresses): `slots`
    [C] int32 (a step of T tokens reads its first T, the rest -1) and the same grouped by
    slot, `order` [C] and `tiles` (`pagoda.ops.lora_reference.group_by_slot`)."""

    slots: torch.Tensor
    order: torch.Tensor
    tiles: torch.Tensor


def _rows(tensor: torch.Tensor, dim: int, part: tuple[int, int, int], what: str) -> torch.Tensor:
    """Features first..first+count (of `whole`) of `tensor` along `dim`."""
    whole, first, count = part
    if tensor.shape[dim] != whole:
        raise ValueError(f"{what} has {tensor.shape[dim]} features along dimension {dim}, the "
                         f"layer {whole}")
    return tensor.narrow(dim, first, count)


class LoRASlots(nn.Module):
    """The adapters' weights of one layer in `num_slots` device slots of rank `max_rank`."""

    def __init__(self, layer: Linear, num_slots: int, max_rank: int, tokens: TokenSlots,
                 dtype: torch.dtype, device: torch.device):
        super().__init__()
        self.layer_prefix = layer.prefix
        self.parts = layer.checkpoint_names
        self.max_rank = max_rank
        self._layer_ref = [layer]  # not a submodule: the layer owns us
        width = len(self.parts) * max_rank
        self.register_buffer("a", torch.zeros(num_slots, width, layer.input_size, dtype=dtype,
                                              device=device), persistent=False)
        self.register_buffer("b", torch.zeros(num_slots, width, layer.output_size, dtype=dtype,
                                              device=device), persistent=False)
        self.tokens = tokens
        ops = current_ops()
        self._shrink, self._expand = ops.lora_shrink, ops.lora_expand

    def _pieces(self, part: str) -> list[tuple[str | None, int, int]]:
        """(shard, first row in the adapter's B, first row in this layer's output) of each
        block of checkpoint projection `part`'s output features."""
        layer = self._layer_ref[0]
        if not isinstance(layer, MergedColumnParallelLinear):
            return [(None, 0, 0)]
        if not layer.fused_checkpoint:
            shard = part.rpartition(".")[2]
            return [(shard, 0, layer.shard_rows(shard)[0])]
        pieces, offset = [], 0
        for shard, size in layer.whole_shards.items():
            pieces.append((shard, offset, layer.shard_rows(shard)[0]))
            offset += size
        return pieces

    def set_slot(self, slot: int, weights: dict[str, tuple[torch.Tensor, torch.Tensor]],
                 scaling: float) -> None:
        """Put an adapter in `slot`: `weights` maps each of this layer's checkpoint
        projections it adapts to its whole (A [r, K], B [N, r]); the others get none."""
        layer = self._layer_ref[0]
        self.a[slot].zero_()
        self.b[slot].zero_()
        for index, part in enumerate(self.parts):
            if part not in weights:
                continue
            a, b = weights[part]
            rank, base = a.shape[0], index * self.max_rank
            if isinstance(layer, RowParallelLinear):
                a = _rows(a, 1, layer.input_part(), f"{part}'s lora_A")
            self.a[slot, base : base + rank].copy_(a)
            for shard, b_first, out_first in self._pieces(part):
                rows = b
                if isinstance(layer, ColumnParallelLinear):
                    whole, first, count = layer.output_part(shard)
                    rows = _rows(b.narrow(0, b_first, whole), 0, (whole, first, count),
                                 f"{part}'s lora_B")
                self.b[slot, base : base + rank,
                       out_first : out_first + rows.shape[0]].copy_(rows.T * scaling)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """y (the base layer's output for x) with each token's adapter applied."""
        x2, y2 = x.reshape(-1, x.shape[-1]), y.reshape(-1, y.shape[-1])
        t = self.tokens
        slots = t.slots[: x2.shape[0]]
        h = self._shrink(x2, self.a, slots, t.order, t.tiles)
        return self._expand(y2, h, self.b, slots, t.order, t.tiles).view(y.shape)
