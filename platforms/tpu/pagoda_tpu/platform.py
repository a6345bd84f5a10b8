"""The TPU platform: XLA devices through torch-xla's PJRT runtime (TPU, or XLA's CPU device).

XLA compiles one program per distinct graph, so there is no graph capture; instead every
step is padded to static (bucketed) shapes (`step_padding`, see `pagoda_tpu.shapes`), the
model runner's forward pass, cache writes and logits run as one program (`after_forward`)
and sampling happens on the host (`samples_on_host`).
"""

from __future__ import annotations

import logging

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

from pagoda.platforms import MemoryInfo, Platform
from pagoda.platforms.host_memory import host_memory
from pagoda.platforms.step_padding import StepShape
from pagoda_tpu.compile_cache import initialize_compile_cache
from pagoda_tpu.shapes import StaticShapeConfig, StepShapes, buckets

logger = logging.getLogger(__name__)

HOST_KV_CACHE_CAP = 4 * 2**30
"""On XLA's CPU device the cache lives in host memory, shared with everything else."""


class TpuPlatform(Platform):
    name = "tpu"
    device_type = "xla"
    supported_dtypes: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float32)
    distributed_backend = "xla"
    ray_resource = "TPU"
    preferred_attention_backends = ("pallas", "xla")
    samples_on_host = True
    supports_async_scheduling = False  # the host samples: it has each step's tokens anyway
    uses_inference_mode = False  # XLA's in-place cache writes need version counters

    def __init__(self) -> None:
        self.pjrt_device = xr.device_type() or "CPU"
        if self.on_cpu:  # a CPU's float32 is its fast path; bfloat16 stays available
            self.supported_dtypes = (torch.float32, torch.bfloat16)
        self.shape_config = StaticShapeConfig.from_env()
        # Before the process's first XLA computation (torch-xla refuses it after), and on
        # TPUs only: XLA's CPU device writes programs but cannot load them back.
        cache_dir = None if self.on_cpu else self.shape_config.cache_dir
        self.compile_cache = cache_dir if initialize_compile_cache(cache_dir) else None

    @property
    def on_cpu(self) -> bool:
        """Whether this is XLA's CPU device (tests), not a TPU."""
        return self.pjrt_device == "CPU"

    def device_count(self) -> int:
        return xr.addressable_runtime_device_count()

    def device_name(self, index: int = 0) -> str:
        real = torch_xla.real_devices()[index]
        return f"XLA {real} (for testing, not a TPU)" if self.on_cpu else f"{real} via PJRT"

    def memory_info(self, index: int = 0) -> MemoryInfo:
        """XLA's own counters on a TPU; host memory on XLA's CPU device (which has none)."""
        if self.on_cpu:
            return host_memory()
        info = xm.get_memory_info(self.torch_device(index))
        total = int(info["bytes_limit"])
        return MemoryInfo(total, total - int(info["bytes_used"]))

    def default_kv_cache_bytes(self, memory: MemoryInfo, step_peak_bytes: int = 0) -> int:
        """Half the free memory after the weights (and the largest step, where measured);
        at most 4 GiB on XLA's CPU device."""
        budget = max(0, (memory.available - step_peak_bytes) // 2)
        return min(budget, HOST_KV_CACHE_CAP) if self.on_cpu else budget

    def torch_device(self, index: int = 0) -> torch.device:
        return torch_xla.device(index)

    def synchronize(self, index: int = 0) -> None:
        torch_xla.sync(wait=True)

    def step_padding(self, limits: StepShape) -> StepShapes:
        shapes = StepShapes(self.shape_config, limits.num_tokens, limits.num_seqs,
                            limits.max_blocks)
        config = self.shape_config
        logger.info("XLA step shapes: tokens %s, sequences %s, block-table widths %s",
                    buckets(config.min_tokens, shapes.max_tokens),
                    buckets(config.min_seqs, shapes.max_seqs),
                    buckets(config.min_blocks, shapes.max_blocks))
        return shapes

    def after_forward(self) -> None:
        torch_xla.sync()  # run the step's program: forward, cache writes, logits

    def describe(self) -> dict[str, object]:
        info = super().describe()
        info["pjrt_device"] = self.pjrt_device
        info["static_shapes"] = True
        info["compile_cache"] = str(self.compile_cache) if self.compile_cache else None
        return info
