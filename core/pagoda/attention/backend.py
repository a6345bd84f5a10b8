"""The AttentionBackend interface.

A backend is a class-level description of a kernel family. The engine builds one
`AttentionMetadata` per step (through the backend's builder) and every attention layer
calls the backend's impl with flattened q/k/v, its layer's paged KV cache and that
metadata. Mixed prefill + decode batches are the normal case.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch

FP8_KV_CACHE_DTYPE = torch.float8_e4m3fn
"""The fp8 KV cache's element type (`--kv-cache-dtype fp8`): e4m3, no infinities."""
FP8_MAX = float(torch.finfo(FP8_KV_CACHE_DTYPE).max)  # 448


def kv_cache_dtype_label(dtype: torch.dtype) -> str:
    """How messages name a cache dtype: "fp8" for float8_e4m3fn, else torch's name."""
    return "fp8" if dtype == FP8_KV_CACHE_DTYPE else str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class KVCacheSpec:
    """The paged KV cache layout of one attention layer, agreed between core and backend.

    Layout "2BSKD": one tensor [2 (key, value), num_blocks, block_size, kv_heads, head_size].
    """

    block_size: int
    num_kv_heads: int
    head_size: int
    dtype: torch.dtype
    layout: str = "2BSKD"

    def shape(self, num_blocks: int) -> tuple[int, ...]:
        return (2, num_blocks, self.block_size, self.num_kv_heads, self.head_size)

    @property
    def block_bytes(self) -> int:
        """Bytes one block takes in one layer (keys and values): the cache element's size,
        so an fp8 cache holds twice the blocks of a 16-bit one in the same bytes."""
        return math.prod(self.shape(1)) * torch.empty((), dtype=self.dtype).element_size()


@dataclass(frozen=True)
class AttentionConfig:
    """What a backend must support for a model; `validate` checks it."""

    num_heads: int
    num_kv_heads: int
    head_size: int
    dtype: torch.dtype
    kv_cache_dtype: torch.dtype
    block_size: int
    sliding_window: int | None = None
    logits_soft_cap: float | None = None


@dataclass
class AttentionMetadata:
    """Per-step description of the flattened batch, shared by all layers.

    Tensors live on the device; the `*_cpu` lists are host copies so that backends
    never need a device-to-host sync.
    """

    num_tokens: int
    slot_mapping: torch.Tensor  # [T] int64, -1 for tokens not to cache
    block_tables: torch.Tensor  # [B, max_blocks] int32
    query_start_loc: torch.Tensor  # [B + 1] int32
    seq_lens: torch.Tensor  # [B] int32
    query_start_loc_cpu: list[int]
    seq_lens_cpu: list[int]
    max_query_len: int
    max_seq_len: int

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens_cpu)

    @property
    def is_pure_decode(self) -> bool:
        return self.max_query_len == 1


class AttentionMetadataBuilder:
    """Turns the common per-step metadata into a backend's own (once per step)."""

    def __init__(self, spec: KVCacheSpec, device: torch.device):
        self.spec = spec
        self.device = device

    def build(self, common: AttentionMetadata) -> AttentionMetadata:
        return common


class AttentionImpl(ABC):
    """One layer's attention computation."""

    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int,
        sliding_window: int | None = None,
        logits_soft_cap: float | None = None,
    ):
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = scale
        self.num_kv_heads = num_kv_heads
        self.sliding_window = sliding_window
        self.logits_soft_cap = logits_soft_cap

    @abstractmethod
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: AttentionMetadata,
        *,
        kv_scales: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Write key/value [T, K, D] into kv_cache, then attend query [T, H, D]; -> [T, H, D].

        Every token's key/value of the step is written before any query attends: a
        request may read prefix blocks that another request of the same step fills.

        `kv_scales` is passed only when kv_cache is fp8 (`FP8_KV_CACHE_DTYPE`, so only to
        backends that list it in `supported_kv_cache_dtypes`): this layer's float32 [2]
        tensor (key scale, value scale) on the device. A key x is stored as
        clamp(x / key scale, -448, 448) in e4m3 (round to nearest even) and reads back as
        stored * key scale; values likewise. Read the scales on the device, never as
        Python floats: decode graphs capture their address at capture time.
        """


class AttentionBackend(ABC):
    """A kernel family for paged attention, described at class level."""

    name: ClassVar[str]
    supported_dtypes: ClassVar[tuple[torch.dtype, ...]] = (
        torch.float32,
        torch.float16,
        torch.bfloat16,
    )
    supported_kv_cache_dtypes: ClassVar[tuple[torch.dtype, ...] | None] = None
    """Cache dtypes its impl writes and reads; None: the `supported_dtypes` (no fp8). A
    backend listing `FP8_KV_CACHE_DTYPE` takes the layer's `kv_scales` in `forward`."""
    supported_head_sizes: ClassVar[tuple[int, ...] | None] = None  # None: any
    supported_block_sizes: ClassVar[tuple[int, ...] | None] = None  # None: any
    supports_sliding_window: ClassVar[bool] = True
    supports_logits_soft_cap: ClassVar[bool] = True
    needs_zeroed_cache: ClassVar[bool] = False
    """Whether the KV cache must start zeroed (kernels that weigh masked-out slots by 0
    read them, and 0 * NaN is NaN); otherwise it is left uninitialised."""
    supports_graph_capture: ClassVar[bool] = False
    """Whether a decode step may be captured as a device graph: `forward` reads only the
    metadata's tensors; its host fields then describe the largest batch of the capture
    (padding rows have sequence length 0 and slot -1) and may only steer launch choices."""
    supports_multi_token_graphs: ClassVar[bool] = False
    """Whether a captured step of up to n tokens a sequence (speculative decoding's verify
    steps) may be replayed for any split of its tokens among its sequences: `forward` reads
    the split from `query_start_loc` on the device, and each padding token is a sequence
    of its own (length 0, slot -1), with sequences of no tokens after them."""

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """Why this backend cannot run in this process whatever the model (e.g. its SDK is
        not installed), or None; `validate` gives it first."""
        return None

    @classmethod
    def kv_cache_dtypes(cls) -> tuple[torch.dtype, ...]:
        """The cache dtypes this backend supports."""
        if cls.supported_kv_cache_dtypes is None:
            return cls.supported_dtypes
        return cls.supported_kv_cache_dtypes

    @classmethod
    def validate(cls, config: AttentionConfig) -> list[str]:
        """Reasons this backend cannot serve `config`; empty when it can."""
        unavailable = cls.unavailable_reason()
        reasons = [unavailable] if unavailable else []
        if config.dtype not in cls.supported_dtypes:
            reasons.append(f"dtype {config.dtype} not in {cls.supported_dtypes}")
        kv_dtypes = cls.kv_cache_dtypes()
        if config.kv_cache_dtype not in kv_dtypes:
            reasons.append(f"kv cache dtype {kv_cache_dtype_label(config.kv_cache_dtype)} not "
                           f"supported (it supports "
                           f"{', '.join(kv_cache_dtype_label(d) for d in kv_dtypes)})")
        if cls.supported_head_sizes is not None and config.head_size not in cls.supported_head_sizes:
            reasons.append(f"head size {config.head_size} not in {cls.supported_head_sizes}")
        if (
            cls.supported_block_sizes is not None
            and config.block_size not in cls.supported_block_sizes
        ):
            reasons.append(f"block size {config.block_size} not in {cls.supported_block_sizes}")
        if config.sliding_window is not None and not cls.supports_sliding_window:
            reasons.append("sliding window attention is not supported")
        if config.logits_soft_cap is not None and not cls.supports_logits_soft_cap:
            reasons.append("logits soft-capping is not supported")
        if config.num_heads % config.num_kv_heads:
            reasons.append(f"{config.num_heads} heads not divisible by {config.num_kv_heads} kv heads")
        return reasons

    @classmethod
    @abstractmethod
    def get_impl_cls(cls) -> type[AttentionImpl]:
        """The per-layer implementation class."""

    @classmethod
    def get_builder_cls(cls) -> type[AttentionMetadataBuilder]:
        return AttentionMetadataBuilder

    @classmethod
    def kv_cache_shape(cls, spec: KVCacheSpec, num_blocks: int) -> tuple[int, ...]:
        return spec.shape(num_blocks)
