"""The CPU platform."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from pagoda.platforms import MemoryInfo, Platform
from pagoda.platforms.host_memory import host_memory
from pagoda_cpu import csrc
from pagoda_cpu.host import core_count, device_name, has_fast_bf16

if TYPE_CHECKING:
    from pagoda.models.decode_fusion import DecodeLayerSpec, FusedDecodeLayer


class CpuPlatform(Platform):
    name = "cpu"
    device_type = "cpu"
    supported_dtypes = (torch.float32, torch.bfloat16, torch.float16)
    distributed_backend = "gloo"
    ray_resource = "CPU"
    preferred_attention_backends = ("cpu_sdpa", "reference")

    @property
    def default_dtype(self) -> torch.dtype:
        """bfloat16 where the CPU has native bf16 matmuls (4-5x float32 there), else float32."""
        return torch.bfloat16 if has_fast_bf16() else torch.float32

    def keeps_gguf_quantized(self, dtype: torch.dtype) -> bool:
        """float32 with the native kernels (`pagoda_cpu.csrc`): a few rows are bound by
        reading the weight, of which the packed kernels read a quarter (Q4) or a half
        (Q8_0); a batch of rows by the multiply-adds, which their GEMM kernel does faster
        than dequantizing for oneDNN (`ci/bench_cpu_csrc.py`: 576->3072 at 64 rows, 1115
        us against 1234 on 2 Zen 5 cores). In bfloat16 the dense matmuls win everywhere but at
        one sequence."""
        return dtype == torch.float32 and csrc.native() is not None

    def quantized_head_max_rows(self, dtype: torch.dtype) -> int:
        """128 rows with the native GEMM kernel in float32, which multiplies the codes
        faster than oneDNN multiplies the dense table up to there: SmolLM2's Q8_0 head
        (576->49152) on 2 AVX2-only Zen 3 cores, 17.6 ms against 22.2 at 32 rows, 28.2
        against 29.2 at 64, 59.5 against 62.8 at 128, 152 against 98 at 256 (on 2 Zen 5
        cores 18.5 against 20.8 at 64). Else the default."""
        if dtype == torch.float32 and csrc.native() is not None:
            return 128
        return super().quantized_head_max_rows(dtype)

    def fuse_decode_layer(self, spec: DecodeLayerSpec) -> FusedDecodeLayer | None:
        """The native kernels' `DecodeLayer` where every op of the layer is theirs
        (`pagoda_cpu.decode_layer`)."""
        from pagoda_cpu.decode_layer import fuse_decode_layer

        return fuse_decode_layer(spec)

    def device_count(self) -> int:
        return 1

    def device_name(self, index: int = 0) -> str:
        return device_name()

    def core_count(self) -> int:
        return core_count()

    def memory_info(self, index: int = 0) -> MemoryInfo:
        return host_memory()

    def default_kv_cache_bytes(self, memory: MemoryInfo) -> int:
        """4 GiB (or half the free memory if less): host memory is shared with everything."""
        return min(4 * 2**30, memory.available // 2)

    def torch_device(self, index: int = 0) -> torch.device:
        return torch.device("cpu")

    def init_worker(self, local_rank: int, local_world_size: int) -> None:
        """Worker processes on one host split its cores (each would otherwise run a
        thread per core, and together they would thrash)."""
        if local_world_size > 1:
            torch.set_num_threads(max(1, self.core_count() // local_world_size))
