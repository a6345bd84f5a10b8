"""Paged attention and KV cache writes in static shapes, for XLA.

Every shape here follows from the input shapes alone (no `.tolist()`, no boolean
indexing), so one compiled program serves every step of a bucket. Each query token finds
its sequence and position on the device from `query_start_loc` and `seq_lens`, gathers its
sequence's keys and values through the block table (all `block_tables.shape[1]` blocks),
and masks by position: causal within the sequence, past its length, outside the window.
Prefills, prefill chunks and decodes mix freely in one batch.
"""

from __future__ import annotations

import torch

MAX_GATHER_ELEMENTS = 1 << 27
"""Keys (or values) gathered at once, in elements: tokens are processed in chunks so that
a long prefill over a wide block table does not materialise [T, S, K, D] in one piece."""


def write_kv(
    key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Write key/value [T, K, D] into kv_cache [2, blocks, block_size, K, D] at their slots.

    The cache's last block is reserved for padding: tokens with a negative slot are written
    there (a static-shape scatter cannot skip rows), where no sequence ever reads.
    """
    _, num_blocks, block_size, num_kv_heads, head_size = kv_cache.shape
    padding_slot = (num_blocks - 1) * block_size
    slots = torch.where(slot_mapping < 0, padding_slot, slot_mapping)
    flat = kv_cache.view(2, num_blocks * block_size, num_kv_heads, head_size)
    flat[0].index_copy_(0, slots, key.to(kv_cache.dtype))
    flat[1].index_copy_(0, slots, value.to(kv_cache.dtype))


def token_positions(
    num_tokens: int, query_start_loc: torch.Tensor, seq_lens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sequence row, position) of each of the step's tokens, both [T] int64.

    Tokens past the last sequence's queries (padding) get the last row and position 0.
    """
    device = query_start_loc.device
    tokens = torch.arange(num_tokens, device=device)
    ends = query_start_loc[1:].long()
    seq = (tokens[:, None] >= ends[None, :]).sum(dim=1).clamp(max=ends.shape[0] - 1)
    pos = seq_lens.long()[seq] - (ends[seq] - tokens)
    return seq, torch.where(tokens < ends[-1], pos, 0)


def paged_attention(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    logits_soft_cap: float | None = None,
) -> torch.Tensor:
    """See `pagoda.attention.reference.paged_attention`; computed in float32, in static
    shapes."""
    num_tokens, num_heads, head_size = query.shape
    num_kv_heads = kv_cache.shape[3]
    seq, pos = token_positions(num_tokens, query_start_loc, seq_lens)
    tables = block_tables.long()[seq]  # [T, W]
    width = tables.shape[1] * kv_cache.shape[2]
    chunk = max(1, MAX_GATHER_ELEMENTS // (width * num_kv_heads * head_size))
    q = query.float().view(num_tokens, num_kv_heads, num_heads // num_kv_heads, head_size)
    key_pos = torch.arange(width, device=query.device)
    outputs = []
    for start in range(0, num_tokens, chunk):
        rows = slice(start, start + chunk)
        hidden = key_pos[None, :] > pos[rows, None]  # [t, S]: causal, and past seq_len
        if sliding_window is not None:
            hidden |= key_pos[None, :] <= pos[rows, None] - sliding_window
        outputs.append(_attend(q[rows], kv_cache, tables[rows], hidden, scale, logits_soft_cap))
    out = outputs[0] if len(outputs) == 1 else torch.cat(outputs)
    return out.reshape(num_tokens, num_heads, head_size).to(query.dtype)


def _attend(
    q: torch.Tensor,  # [t, K, G, D] float32
    kv_cache: torch.Tensor,
    tables: torch.Tensor,  # [t, W]
    hidden: torch.Tensor,  # [t, S] bool
    scale: float,
    logits_soft_cap: float | None,
) -> torch.Tensor:
    shape = (tables.shape[0], hidden.shape[1], *kv_cache.shape[3:])  # [t, S, K, D]
    k = kv_cache[0][tables].reshape(shape).float()
    v = kv_cache[1][tables].reshape(shape).float()
    scores = torch.einsum("tkgd,tskd->tkgs", q, k) * scale
    if logits_soft_cap is not None:
        scores = logits_soft_cap * torch.tanh(scores / logits_soft_cap)
    scores = scores.masked_fill(hidden[:, None, None, :], float("-inf"))
    return torch.einsum("tkgs,tskd->tkgd", scores.softmax(dim=-1), v)
