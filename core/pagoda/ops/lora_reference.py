"""References of the batched LoRA ops: every token of a step applies its own adapter (or
none), the adapters' weights stacked in device slots.

A LoRA adapter adds x A^T B^T (scaled) to a linear layer's output y = x W^T. With the
adapters of a step in S slots, `a` [S, R, K] holds each slot's A and `b` [S, R, N] its B
transposed (the scaling folded in, ranks below R padded with zeros), and `slots` [T] says
which slot each token uses (-1: none). The work is split in two ops so that a
row-parallel layer can sum the small `lora_shrink` output, or a merged layer can shrink
once for all its parts: `lora_expand(y, lora_shrink(x, a, slots, ...), b, slots, ...)`
is the layer's output with each token's adapter applied.

The same assignment also comes grouped by slot (`group_by_slot`: `order` and `tiles`),
computed once per step, for kernels that take one slot's tokens at a time; the
references read `slots` only.

Both references are two dense matmuls over all slots at once (S x R is small), then a
selection by slot: no host synchronisation and no shape that depends on the slots, so
they run inside captured device graphs and are the fast way on a CPU too.
"""

from __future__ import annotations

import numpy as np
import torch

LORA_TILE = 64
"""Most tokens of one tile (`group_by_slot`)."""


def group_by_slot(slots: np.ndarray, num_slots: int,
                  tile: int = LORA_TILE) -> tuple[np.ndarray, np.ndarray]:
    """The tokens of `slots` [C] (-1: none) grouped by slot, for kernels: `order` [C]
    int32, the token indices sorted by slot (stable; tokens of none last), and `tiles`
    [C // tile + num_slots + 1, 3] int32, rows (slot, first index into order, count <=
    tile) that together cover every token once, each tile within one slot's tokens
    (slot -1: tokens of none, the last); unused rows have count 0. Shapes depend only on C
    and num_slots, so one buffer serves every step. Where the tokens past the first T are
    all of none, the first `tiles_for(T, num_slots)` rows cover the first T tokens."""
    capacity = len(slots)
    group = np.where(slots < 0, num_slots, slots).astype(np.int64)  # none last
    order = np.argsort(group, kind="stable").astype(np.int32)
    counts = np.bincount(group, minlength=num_slots + 1)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    per_group = -(-counts // tile)
    first_tile = np.concatenate(([0], np.cumsum(per_group)[:-1]))
    group_of_tile = np.repeat(np.arange(num_slots + 1), per_group)
    j = np.arange(len(group_of_tile)) - first_tile[group_of_tile]  # tile within its group
    tiles = np.zeros((capacity // tile + num_slots + 1, 3), np.int32)
    used = len(group_of_tile)
    tiles[:used, 0] = np.where(group_of_tile == num_slots, -1, group_of_tile)
    tiles[:used, 1] = starts[group_of_tile] + j * tile
    tiles[:used, 2] = np.minimum(tile, counts[group_of_tile] - j * tile)
    return order, tiles


def tiles_for(num_tokens: int, num_slots: int, tile: int = LORA_TILE) -> int:
    """How many of `group_by_slot`'s tiles cover a step's first `num_tokens` tokens (at
    most one partial tile per slot and one for the tokens of none)."""
    return -(-num_tokens // tile) + num_slots + 1


def _slot_mask(slots: torch.Tensor, num_slots: int, dtype: torch.dtype) -> torch.Tensor:
    """[T, S] one-hot rows of each token's slot (all zeros for -1)."""
    columns = torch.arange(num_slots, device=slots.device)
    return (slots.unsqueeze(1).to(torch.int64) == columns).to(dtype)


def lora_shrink(x: torch.Tensor, a: torch.Tensor, slots: torch.Tensor, order: torch.Tensor,
                tiles: torch.Tensor) -> torch.Tensor:
    """h [T, R] in x's dtype: h[t] = a[slots[t]] x[t] (products in x's dtype's matmul,
    accumulated as torch does), zeros where slots[t] is -1. x [T, K], a [S, R, K] (x's
    dtype), slots [T] int32 or int64 in -1..S-1; `order` and `tiles` are
    `group_by_slot` of slots (or of a longer buffer that starts with them)."""
    num_slots, rank, k = a.shape
    every = (x @ a.reshape(num_slots * rank, k).T).view(-1, num_slots, rank)  # [T, S, R]
    return (every * _slot_mask(slots, num_slots, x.dtype).unsqueeze(2)).sum(dim=1)


def lora_expand(y: torch.Tensor, h: torch.Tensor, b: torch.Tensor, slots: torch.Tensor,
                order: torch.Tensor, tiles: torch.Tensor) -> torch.Tensor:
    """y + delta [T, N] in y's dtype, delta[t] = h[t] b[slots[t]] (0 where slots[t] is -1).
    y [T, N], h [T, R] and b [S, R, N] of one dtype; y is not modified. `order`, `tiles`:
    as for `lora_shrink`."""
    num_slots, rank, n = b.shape
    spread = h.unsqueeze(1) * _slot_mask(slots, num_slots, h.dtype).unsqueeze(2)  # [T, S, R]
    return y + spread.reshape(-1, num_slots * rank) @ b.reshape(num_slots * rank, n)
