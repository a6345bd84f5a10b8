"""A profiling step: the largest batch the scheduler may send, run once before the KV
cache exists, to measure the activation memory it needs (and compile its kernels)."""

from __future__ import annotations

import torch
from torch import nn

from pagoda.attention.backend import AttentionBackend, AttentionMetadata, KVCacheSpec
from pagoda.distributed import pp_group


@torch.inference_mode()
def run_profile_step(model: nn.Module, kv_spec: KVCacheSpec,
                     attn_backend: type[AttentionBackend], device: torch.device, *,
                     num_tokens: int, max_seq_len: int | None, num_sampled: int) -> None:
    """Prefill `num_tokens` tokens as sequences of at most `max_seq_len`, then compute
    logits and a full sort for `num_sampled` rows (the top-p sampler's worst case; none
    for a pooling model).

    Nothing is written to a cache (every slot is -1) and attention reads one scratch block
    per layer, so only activations and scratch count toward the measured peak.
    """
    seq_len = min(num_tokens, max_seq_len or num_tokens)
    lens = [seq_len] * (num_tokens // seq_len) + ([num_tokens % seq_len] if num_tokens % seq_len
                                                   else [])
    starts = [0]
    for n in lens:
        starts.append(starts[-1] + n)
    scratch = torch.zeros(attn_backend.kv_cache_shape(kv_spec, 1), dtype=kv_spec.dtype,
                          device=device)
    width = -(-seq_len // kv_spec.block_size)

    def tensor(values: list[int], dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=device)

    metadata = attn_backend.get_builder_cls()(kv_spec, device).build(AttentionMetadata(
        num_tokens=num_tokens,
        slot_mapping=torch.full((num_tokens,), -1, dtype=torch.int64, device=device),
        block_tables=torch.zeros(len(lens), width, dtype=torch.int32, device=device),
        query_start_loc=tensor(starts, torch.int32),
        seq_lens=tensor(lens, torch.int32),
        query_start_loc_cpu=starts,
        seq_lens_cpu=lens,
        max_query_len=seq_len,
        max_seq_len=seq_len,
    ))
    positions = torch.cat([torch.arange(n, device=device) for n in lens])
    input_ids = torch.zeros(num_tokens, dtype=torch.int64, device=device)
    num_layers = model.num_attention_layers
    stage = pp_group()
    extra = {} if stage.is_first else {"intermediate": [
        t.zero_() for t in model.intermediate_like(num_tokens, device)]}
    hidden = model(input_ids, positions, [scratch] * num_layers, metadata, **extra)
    if stage.is_last and num_sampled:
        rows = torch.arange(min(num_sampled, num_tokens), device=device)
        logits = model.compute_logits(hidden[rows])
        torch.sort(logits.float(), dim=-1, descending=True)
