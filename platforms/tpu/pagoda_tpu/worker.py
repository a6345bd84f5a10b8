"""The XLA worker: core's Worker with a persistent compilation cache (TPU), a zeroed
preallocated KV cache and the static-shape model runner."""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch_xla

from pagoda.worker.worker import Worker
from pagoda_tpu.compile_cache import initialize_compile_cache
from pagoda_tpu.model_runner import XlaModelRunner
from pagoda_tpu.platform import TpuPlatform
from pagoda_tpu.shapes import StaticShapeConfig, StepShapes, buckets

logger = logging.getLogger(__name__)


class XlaWorker(Worker):
    def init_device(self) -> None:
        super().init_device()
        self.shape_config = StaticShapeConfig.from_env()
        # Before the first computation (torch-xla refuses it after), and on TPUs only: XLA's
        # CPU device writes programs but cannot load them back ("not supported").
        on_tpu = isinstance(self.platform, TpuPlatform) and not self.platform.on_cpu
        cache_dir = self.shape_config.cache_dir if on_tpu else None
        self.compile_cache = initialize_compile_cache(cache_dir)

    def load_model(self) -> None:
        super().load_model()
        torch_xla.sync()  # materialise the weights, so that no step's program loads them

    def initialize_cache(self, num_blocks: int) -> None:
        shape = self.attn_backend.kv_cache_shape(self.kv_spec, num_blocks)
        # Zeroed, not empty: attention multiplies masked-out slots by 0, and 0 * NaN is NaN.
        kv_caches = [torch.zeros(shape, dtype=self.kv_spec.dtype, device=self.device)
                     for _ in range(self.num_layers)]
        torch_xla.sync()
        scheduler = self.config.scheduler
        shapes = StepShapes(self.shape_config, scheduler.max_num_batched_tokens,
                            scheduler.max_num_seqs, num_blocks)
        config = self.shape_config
        logger.info("XLA step shapes: tokens %s, sequences %s, block-table widths %s",
                    buckets(config.min_tokens, shapes.max_tokens),
                    buckets(config.min_seqs, shapes.max_seqs),
                    buckets(config.min_blocks, shapes.max_blocks))
        builder = self.attn_backend.get_builder_cls()(self.kv_spec, self.device)
        self.runner = XlaModelRunner(
            self.model, kv_caches, builder, self.kv_spec.block_size,
            self.hf_config.vocab_size, self.device, shapes, seed=self.config.model.seed,
        )

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["compile_cache"] = str(self.shape_config.cache_dir) if self.compile_cache else None
        return info
