"""The "triton" attention backend on AMD GPUs: the shared kernels with ROCm launch parameters."""

from __future__ import annotations

import torch

from pagoda.attention.backend import AttentionImpl
from pagoda.kernels.triton.backend import TritonAttentionBackend, TritonAttentionImpl
from pagoda.kernels.triton.launch import TritonLaunch
from pagoda_rocm.triton_ops import device_launch


class RocmTritonAttentionImpl(TritonAttentionImpl):
    def launch(self, device: torch.device) -> TritonLaunch:
        return device_launch(device)


class RocmTritonAttentionBackend(TritonAttentionBackend):
    @classmethod
    def get_impl_cls(cls) -> type[AttentionImpl]:
        return RocmTritonAttentionImpl
