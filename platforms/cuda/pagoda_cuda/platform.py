"""The CUDA platform: NVIDIA GPUs through PyTorch, with Triton kernels."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from pagoda.platforms.accelerator import AcceleratorPlatform

if TYPE_CHECKING:
    from pagoda.models.decode_fusion import DecodeLayerSpec, FusedDecodeLayer

FUSE_DECODE_ENV = "PAGODA_CUDA_FUSE_DECODE"
"""Which layers fuse their one-sequence decode steps (`fuse_decode_layer`): `native` (the
default) those with unquantized weights and those whose linears are all the CUDA C++
kernels' providers' (INT4, FP8; the kernels compute their normed inputs themselves: C with
INT4 weights 3.10 -> 2.95 ms a token on an H100, bench UN; with FP8 4.08 -> 3.92, bench
XF); `dense` only the unquantized ones; `1` every layer the kernels can run; `rotary_silu`
the same, the norms left to their own kernels; `0` none. Benchmark U on an H100 (session
15, docs/benchmarks.md), C in ms a token, op by op / fused / rotary_silu: bf16 5.91 / 5.70 /
5.82, FP8 3.97 / 4.06 / 4.03, INT4 (Triton's kernel then) 4.24 / 4.62 / 4.34: the quantized
one-row Triton kernels, bound by their arithmetic, lose more to computing their inputs than
the launches saved."""

FUSE_DECODE_MODES = ("native", "dense", "1", "rotary_silu", "0")

TP_GRAPHS_ENV = "PAGODA_CUDA_TP_GRAPHS"
"""1: tensor-parallel decode steps replay from CUDA graphs holding NCCL's all-reduce (NCCL
supports capture since 2.9). Off until `bash ci/gpu.sh multigpu`, which turns it on, has
run on a machine of several GPUs."""


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

    @property
    def graphs_hold_collectives(self) -> bool:  # type: ignore[override]
        return os.environ.get(TP_GRAPHS_ENV) == "1"

    def capability(self, index: int = 0) -> tuple[int, int]:
        """Compute capability of device `index`, e.g. (9, 0) for an H100/H200."""
        return torch.cuda.get_device_capability(index)

    def device_detail(self, props: Any) -> str:
        return f"sm_{props.major}{props.minor}"

    def fuse_decode_layer(self, spec: DecodeLayerSpec) -> FusedDecodeLayer | None:
        """One-sequence decode steps with the residual add and RMSNorm, and SiLU-and-mul,
        computed by the one-row matmul kernels after them, and the rotary embedding by the
        qkv kernel (`pagoda.kernels.triton.decode_layer`), for the layers FUSE_DECODE_ENV
        names."""
        mode = os.environ.get(FUSE_DECODE_ENV, FUSE_DECODE_MODES[0])
        if mode not in FUSE_DECODE_MODES:
            raise ValueError(f"{FUSE_DECODE_ENV}={mode!r}: expected one of "
                             f"{', '.join(FUSE_DECODE_MODES)}")
        if mode == "0":
            return None
        from pagoda.kernels.triton.decode_layer import fuse_decode_layer
        from pagoda_cuda import fp8_ops, woq_ops
        from pagoda_cuda.triton_ops import KERNELS

        every = mode in ("1", "rotary_silu")
        native = (woq_ops.row_matmul, fp8_ops.row_matmul)
        own = ((*native, _triton_row_matmul) if every else native if mode == "native" else ())
        return fuse_decode_layer(spec, KERNELS, fuse_norms=mode != "rotary_silu",
                                 quantized=every, row_matmuls=own)

    def describe(self) -> dict[str, object]:
        info = super().describe()
        info["capability"] = ".".join(map(str, self.capability(0)))
        return info


def _triton_row_matmul(linear: Any) -> Any:
    """Triton's one-row kernel for a linear of a "cuda_native" provider (which hands Triton
    the weights its kernel does not take, and has no fused-layer kernel of its own for
    them), or None."""
    from dataclasses import replace

    from pagoda.kernels.triton.decode_layer import row_matmul
    from pagoda_cuda import fp8_ops, woq_ops
    from pagoda_cuda.triton_ops import KERNELS

    triton_op = {woq_ops.woq_linear: KERNELS.woq_linear,
                 fp8_ops.fp8_linear: KERNELS.fp8_linear}.get(linear.op)
    return None if triton_op is None else row_matmul(replace(linear, op=triton_op), KERNELS)
