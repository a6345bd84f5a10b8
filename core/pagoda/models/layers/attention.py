"""The attention layer: one AttentionImpl of the chosen backend over the paged KV cache."""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from torch import nn

from pagoda.attention import FP8_KV_CACHE_DTYPE, AttentionBackend, AttentionMetadata
from pagoda.attention.backend import kv_cache_dtype_label

logger = logging.getLogger(__name__)

KV_SCALE_NAMES = {
    "k_scale": 0, "v_scale": 1,  # compressed-tensors (a kv_cache_scheme in its config)
    "k_proj.output_scale": 0, "v_proj.output_scale": 1,  # older FP8 checkpoints
}
"""Checkpoint names of an fp8 KV cache's per-tensor scales, under the module that owns the
attention projections (e.g. "model.layers.3.self_attn."), and which scale each is: 0 for
keys, 1 for values."""


class Attention(nn.Module):
    """Writes the step's keys/values into this layer's cache and attends over it.

    `kv_scales` (float32 [2]: key scale, value scale; 1.0 unless the checkpoint has them)
    go to the backend when the cache is fp8. A buffer, not a parameter: dummy weights leave
    it alone and no checkpoint must have it; loading writes it in place, so a captured
    decode graph reads the loaded values.
    """

    def __init__(
        self,
        num_heads: int,
        head_size: int,
        num_kv_heads: int,
        *,
        attn_backend: type[AttentionBackend],
        scale: float | None = None,
        sliding_window: int | None = None,
        logits_soft_cap: float | None = None,
    ):
        super().__init__()
        self.num_heads = num_heads
        self.head_size = head_size
        self.num_kv_heads = num_kv_heads
        self.sliding_window = sliding_window
        self.impl = attn_backend.get_impl_cls()(
            num_heads,
            head_size,
            head_size**-0.5 if scale is None else scale,
            num_kv_heads,
            sliding_window,
            logits_soft_cap,
        )
        self.register_buffer("kv_scales", torch.ones(2, dtype=torch.float32))
        self.kv_scales_loaded = [False, False]
        """Whether the key and the value scale came from the checkpoint."""

    def checkpoint_loaders(self, path: str) -> dict[str, Callable[[torch.Tensor, str], None]]:
        """Checkpoint names this layer loads itself (see `load_checkpoint_weights`): its KV
        cache scales, named under the parent module of `path` (this layer's own name)."""
        parent = path.rpartition(".")[0]
        prefix = f"{parent}." if parent else ""
        return {prefix + name: (lambda tensor, name, i=index: self._load_kv_scale(i, tensor, name))
                for name, index in KV_SCALE_NAMES.items()}

    @torch.no_grad()
    def _load_kv_scale(self, index: int, tensor: torch.Tensor, name: str) -> None:
        if tensor.numel() != 1:
            raise ValueError(f"KV cache scale {name!r} has shape {tuple(tensor.shape)}: only "
                             "per-tensor scales (one number per layer) are supported")
        value = float(tensor.detach().reshape(()).float())
        if not value > 0 or value == float("inf"):
            raise ValueError(f"KV cache scale {name!r} is {value}: it must be finite and > 0")
        self.kv_scales[index].fill_(value)
        self.kv_scales_loaded[index] = True

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: AttentionMetadata,
    ) -> torch.Tensor:
        """query [T, H, D], key/value [T, K, D] -> [T, H * D]."""
        if kv_cache.dtype == FP8_KV_CACHE_DTYPE:
            out = self.impl.forward(query, key, value, kv_cache, metadata,
                                    kv_scales=self.kv_scales)
        else:
            out = self.impl.forward(query, key, value, kv_cache, metadata)
        return out.flatten(1)


def log_kv_cache_scales(model: nn.Module, kv_cache_dtype: torch.dtype) -> None:
    """Say once what the model's KV cache scales are: the checkpoint's, 1.0, or ignored
    (loaded for a cache that is not fp8)."""
    layers = [m for m in model.modules() if isinstance(m, Attention)]
    loaded = [m for m in layers if any(m.kv_scales_loaded)]
    if kv_cache_dtype != FP8_KV_CACHE_DTYPE:
        if loaded:
            logger.info("The checkpoint's KV cache scales (%d layers) are ignored: the KV cache "
                        "is %s, not fp8", len(loaded), kv_cache_dtype_label(kv_cache_dtype))
        return
    if not loaded:
        logger.info("fp8 KV cache: the checkpoint has no KV cache scales (k_scale/v_scale), "
                    "so every layer's are 1.0")
        return
    partial = [i for i, m in enumerate(layers) if not all(m.kv_scales_loaded)]
    if partial:
        logger.warning("fp8 KV cache: %d of this stage's %d attention layers lack a key or "
                       "value scale in the checkpoint; 1.0 is used there", len(partial),
                       len(layers))
    scales = torch.stack([m.kv_scales for m in layers]).cpu()
    logger.info("fp8 KV cache with the checkpoint's scales: keys %.4g..%.4g, values "
                "%.4g..%.4g", scales[:, 0].min(), scales[:, 0].max(), scales[:, 1].min(),
                scales[:, 1].max())
