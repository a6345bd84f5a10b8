"""Launch helpers shared by the Triton kernels."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

try:  # grid dependency control: Triton 3.4 and later
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:
    gdc_launch_dependents = gdc_wait = None

_DOT_DTYPES = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}


def dependent_launch_supported() -> bool:
    """Whether this Triton can launch kernels that wait for the one ahead of them
    (`TritonLaunch.dependent_launch`)."""
    return gdc_wait is not None


@triton.jit
def wait_for_prior_kernels(PDL: tl.constexpr):
    """A kernel's first step under programmatic dependent launch (PDL, see
    `TritonLaunch.dependent_launch`): let the next kernel launch now, and wait until the
    kernels before this one have finished and their writes are visible. Every program of a
    kernel launched with PDL calls it before it reads or writes tensors: the next kernel
    relies on this one's end to imply the end of everything before it."""
    if PDL:
        gdc_launch_dependents()
        gdc_wait()


def interpreted(kernel: object) -> bool:
    """Whether `kernel` runs in Triton's CPU interpreter (TRITON_INTERPRET=1 at import)."""
    return isinstance(kernel, InterpretedFunction)


def dot_dtype(dtype: torch.dtype, kernel: object) -> tl.dtype:
    """Operand type of `tl.dot` for data of `dtype`: the data's own 16-bit type on a GPU
    (tensor cores, float32 accumulation), else float32. The interpreter multiplies
    bfloat16 wrongly, so it always gets float32 (exact for 16-bit inputs)."""
    if interpreted(kernel):
        return tl.float32
    return _DOT_DTYPES.get(dtype, tl.float32)


@dataclass(frozen=True)
class GemvTiles:
    """Launch of a register-path gemv: weight rows and K tile per program, K splits (see
    `gemv.num_k_splits`), warps, pipeline stages."""

    block_n: int
    block_k: int
    num_splits: int = 1
    num_warps: int = 4
    num_stages: int = 3

    @property
    def label(self) -> str:
        return (f"n{self.block_n} k{self.block_k} split{self.num_splits} "
                f"w{self.num_warps} s{self.num_stages}")


@functools.cache
def parallel_units(device: torch.device) -> int:
    """Streaming multiprocessors (or compute units) of `device`; 1 where unknown."""
    try:
        props = torch.get_device_module(device).get_device_properties(device)
    except (AttributeError, RuntimeError, AssertionError):
        return 1
    return int(getattr(props, "multi_processor_count", 1))


def pow2(n: int, minimum: int = 1) -> int:
    """The smallest power of two >= max(n, minimum)."""
    return max(triton.next_power_of_2(max(n, 1)), minimum)


def rows(x: torch.Tensor, width: int) -> torch.Tensor:
    """`x` as a 2-D [rows, width] view with unit stride along the last dim (copied if not)."""
    x2 = x.reshape(-1, width)
    return x2 if x2.stride(-1) == 1 else x2.contiguous()


def unit_last_stride(x: torch.Tensor) -> torch.Tensor:
    """`x` itself when its last dim is contiguous, else a contiguous copy."""
    return x if x.stride(-1) == 1 else x.contiguous()


@triton.jit
def grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 GROUP_M: tl.constexpr):
    """(row tile, column tile) of program `pid` of a tiled GEMM, programs running down
    groups of GROUP_M row tiles column by column, so that neighbouring programs share
    weight tiles in L2."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    width = GROUP_M * tl.cdiv(N, BLOCK_N)
    first_m = (pid // width) * GROUP_M
    rows_here = tl.minimum(tiles_m - first_m, GROUP_M)
    return first_m + (pid % width) % rows_here, (pid % width) // rows_here
