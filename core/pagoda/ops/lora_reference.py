"""References of the batched LoRA ops: every token of a step applies its own adapter (or
none), the adapters' weights stacked in device slots.

A LoRA adapter adds x A^T B^T (scaled) to a linear layer's output y = x W^T. With the
adapters of a step in S slots, `a` [S, R, K] holds each slot's A and `b` [S, R, N] its B
transposed (the scaling folded in, ranks below R padded with zeros), and `slots` [T] says
which slot each token uses (-1: none). The work is split in two ops so that a
row-parallel layer can sum the small `lora_shrink` output, or a merged layer can shrink
once for all its parts: `lora_expand(y, lora_shrink(x, a, slots), b, slots)` is the
layer's output with each token's adapter applied.

Both are written as two dense matmuls over all slots at once (S x R is small), then a
selection by slot: no host synchronisation and no shape that depends on the slots, so
they run inside captured device graphs and are the fast way on a CPU too.
"""

from __future__ import annotations

import torch


def _slot_mask(slots: torch.Tensor, num_slots: int, dtype: torch.dtype) -> torch.Tensor:
    """[T, S] one-hot rows of each token's slot (all zeros for -1)."""
    columns = torch.arange(num_slots, device=slots.device)
    return (slots.unsqueeze(1).to(torch.int64) == columns).to(dtype)


def lora_shrink(x: torch.Tensor, a: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """h [T, R] in x's dtype: h[t] = a[slots[t]] x[t] (products in x's dtype's matmul,
    accumulated as torch does), zeros where slots[t] is -1. x [T, K], a [S, R, K] (x's
    dtype), slots [T] int32 or int64 in -1..S-1."""
    num_slots, rank, k = a.shape
    every = (x @ a.reshape(num_slots * rank, k).T).view(-1, num_slots, rank)  # [T, S, R]
    return (every * _slot_mask(slots, num_slots, x.dtype).unsqueeze(2)).sum(dim=1)


def lora_expand(y: torch.Tensor, h: torch.Tensor, b: torch.Tensor,
                slots: torch.Tensor) -> torch.Tensor:
    """y + delta [T, N] in y's dtype, delta[t] = h[t] b[slots[t]] (0 where slots[t] is -1).
    y [T, N], h [T, R] and b [S, R, N] of one dtype; y is not modified."""
    num_slots, rank, n = b.shape
    spread = h.unsqueeze(1) * _slot_mask(slots, num_slots, h.dtype).unsqueeze(2)  # [T, S, R]
    return y + spread.reshape(-1, num_slots * rank) @ b.reshape(num_slots * rank, n)
