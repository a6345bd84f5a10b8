"""The "triton" attention backend on NVIDIA GPUs: the shared kernels with CUDA's launch
parameters (`pagoda_cuda.triton_ops.device_launch`)."""

from __future__ import annotations

import torch

from pagoda.attention.backend import AttentionImpl
from pagoda.kernels.triton.backend import TritonAttentionBackend, TritonAttentionImpl
from pagoda.kernels.triton.launch import TritonLaunch
from pagoda_cuda.triton_ops import device_launch


class CudaTritonAttentionImpl(TritonAttentionImpl):
    def launch(self, device: torch.device) -> TritonLaunch:
        return device_launch(device)


class CudaTritonAttentionBackend(TritonAttentionBackend):
    @classmethod
    def get_impl_cls(cls) -> type[AttentionImpl]:
        return CudaTritonAttentionImpl
