"""The `pallas` attention backend: torch-xla's ragged paged attention kernel, TPU only.

Written against torch-xla 2.9's `ragged_paged_attention`; the kernel has NEVER RUN (no TPU
was available). Only the glue around it (cache layout, writes, arguments) is tested, on the
host, against torch-xla's plain-torch reference of the kernel. `validate` refuses it
anywhere but a real TPU with JAX installed, so on XLA's CPU device the engine and the
conformance kit fall back to the `xla` backend.

The kernel's cache layout differs from core's: one tensor [blocks, block_size, 2 * K, D]
per layer, keys and values interleaved along the head axis (key head h at 2h, value head h
at 2h + 1), plus one block for padding tokens as in the `xla` backend.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, fields

import torch
import torch_xla.runtime as xr

from pagoda.attention import (
    AttentionBackend,
    AttentionConfig,
    AttentionImpl,
    AttentionMetadata,
    AttentionMetadataBuilder,
    KVCacheSpec,
)

HEAD_SIZE_MULTIPLE = 128  # conservative: the TPU's lane width; other sizes are unexplored


@dataclass
class PallasMetadata(AttentionMetadata):
    seqs_in_use: torch.Tensor
    """[1] int32: the kernel reads only this many rows of the padded tables (`num_seqs`,
    the property, counts the padding rows too)."""


class PallasMetadataBuilder(AttentionMetadataBuilder):
    def build(self, common: AttentionMetadata) -> PallasMetadata:
        in_use = sum(1 for n in common.seq_lens_cpu if n > 0)
        seqs_in_use = torch.tensor([in_use], dtype=torch.int32).to(self.device)
        return PallasMetadata(**{f.name: getattr(common, f.name) for f in fields(common)},
                              seqs_in_use=seqs_in_use)


class PallasAttentionImpl(AttentionImpl):
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: AttentionMetadata,
    ) -> torch.Tensor:
        # Imported here: the module is loaded on any XLA device to run `validate`.
        from torch_xla.experimental.custom_kernel import ragged_paged_attention

        assert isinstance(metadata, PallasMetadata)
        num_blocks, block_size, combined_heads, head_size = kv_cache.shape
        padding_slot = (num_blocks - 1) * block_size
        slots = torch.where(metadata.slot_mapping < 0, padding_slot, metadata.slot_mapping)
        interleaved = torch.stack((key, value), dim=2).reshape(-1, combined_heads, head_size)
        kv_cache.view(-1, combined_heads, head_size).index_copy_(
            0, slots, interleaved.to(kv_cache.dtype))
        return ragged_paged_attention(
            query, kv_cache, metadata.seq_lens, metadata.block_tables,
            metadata.query_start_loc, metadata.seqs_in_use, sm_scale=self.scale,
            sliding_window=self.sliding_window, soft_cap=self.logits_soft_cap,
        )


class PallasAttentionBackend(AttentionBackend):
    name = "pallas"
    supported_dtypes = (torch.bfloat16, torch.float32)
    supported_kv_cache_dtypes = supported_dtypes  # no fp8 KV cache
    needs_zeroed_cache = True  # as the xla backend's: the kernel is unverified

    @classmethod
    def unavailable_reason(cls) -> str | None:
        if xr.device_type() != "TPU":
            return f"needs a real TPU (PJRT device is {xr.device_type()})"
        if importlib.util.find_spec("jax") is None:
            return "needs JAX for the Pallas kernel: pip install 'pagoda-tpu[tpu]'"
        return None

    @classmethod
    def validate(cls, config: AttentionConfig) -> list[str]:
        reasons = super().validate(config)
        if config.head_size % HEAD_SIZE_MULTIPLE:
            reasons.append(f"head size {config.head_size} is not a multiple of "
                           f"{HEAD_SIZE_MULTIPLE}")
        return reasons

    @classmethod
    def get_impl_cls(cls) -> type[AttentionImpl]:
        return PallasAttentionImpl

    @classmethod
    def get_builder_cls(cls) -> type[AttentionMetadataBuilder]:
        return PallasMetadataBuilder

    @classmethod
    def kv_cache_shape(cls, spec: KVCacheSpec, num_blocks: int) -> tuple[int, ...]:
        return (num_blocks + 1, spec.block_size, 2 * spec.num_kv_heads, spec.head_size)
