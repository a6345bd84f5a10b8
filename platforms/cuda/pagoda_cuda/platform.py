"""The CUDA platform: NVIDIA GPUs through PyTorch, with Triton kernels."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from pagoda.platforms.accelerator import AcceleratorPlatform

if TYPE_CHECKING:
    from pagoda.models.decode_fusion import DecodeLayerSpec, FusedDecodeLayer

FUSE_DECODE_ENV = "PAGODA_CUDA_FUSE_DECODE"
"""Set to 1 to fuse one-sequence decode steps (`fuse_decode_layer`). Off by default until
measured on a GPU: the fused kernels have been run only in Triton's CPU interpreter (where
their results equal the op-by-op ones bit for bit) and compiled for sm_90, no GPU having
been lent since they were written (docs/benchmarks.md, session 14)."""


class CudaPlatform(AcceleratorPlatform):
    name = "cuda"
    device_type = "cuda"
    supported_dtypes: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16, torch.float32)
    supports_graph_capture = True
    graph_class = "CUDAGraph"
    executes_asynchronously = True
    distributed_backend = "nccl"
    preferred_attention_backends = ("triton", "reference")

    def __init__(self) -> None:
        major, _ = self.capability(0)
        if major < 8:  # bfloat16 tensor cores (and Triton's bf16 dot) start with Ampere
            self.supported_dtypes = (torch.float16, torch.float32)

    def capability(self, index: int = 0) -> tuple[int, int]:
        """Compute capability of device `index`, e.g. (9, 0) for an H100/H200."""
        return torch.cuda.get_device_capability(index)

    def device_detail(self, props: Any) -> str:
        return f"sm_{props.major}{props.minor}"

    def fuse_decode_layer(self, spec: DecodeLayerSpec) -> FusedDecodeLayer | None:
        """With PAGODA_CUDA_FUSE_DECODE=1, one-sequence decode steps with the residual add
        and RMSNorm, and SiLU-and-mul, computed by the one-row matmul kernels after them,
        and the rotary embedding by the qkv kernel (`pagoda.kernels.triton.decode_layer`)."""
        mode = os.environ.get(FUSE_DECODE_ENV, "0")
        if mode not in ("1", "rotary_silu"):
            return None
        from pagoda.kernels.triton.decode_layer import fuse_decode_layer
        from pagoda_cuda.triton_ops import KERNELS

        return fuse_decode_layer(spec, KERNELS, fuse_norms=mode == "1")

    def describe(self) -> dict[str, object]:
        info = super().describe()
        info["capability"] = ".".join(map(str, self.capability(0)))
        return info
