"""pagoda-cuda's CUDA C++ kernels: `platforms/cuda/csrc`, compiled by setup.py into
`pagoda_cuda/_kernels*.so` (plain CUDA, no PyTorch headers), loaded here with ctypes.

Each launcher takes raw pointers, sizes and strides and the stream to launch on (PyTorch's
current stream of the tensors' device, so launches join CUDA graphs being captured) and
returns 0 or an error code, raised here as `NativeKernelError` with the library's message.
Where the library was not built (no nvcc at install) or this GPU is older than compute
capability 8.0, `unavailable()` says why and the providers built on it step aside.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from pagoda.kernels.triton.common import rows
from pagoda.kernels.triton.launch import KERNEL_FAMILIES

MIN_CAPABILITY = (8, 0)
"""mma.sync with bfloat16 operands (the library's oldest target, setup.py's ARCHS)."""

_P, _I, _L, _F = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
_SIGNATURES = {
    "pagoda_woq4_mma": [_I, _P, _P, _P, _P, _P, _P, _I, _I, _I, _L, _L, _L, _L, _I, _I, _I, _I,
                        _P],
    "pagoda_woq4_mma_row": [_I, _I, _P, _P, _P, _P, _P, _F, _P, _P, _P, _P, _I, _I, _L, _L, _I,
                            _I, _I, _I, _P],
    "pagoda_fp8_row": [_I, _I, _P, _P, _P, _P, _P, _F, _P, _P, _P, _P, _I, _I, _L, _I, _P, _I,
                       _I, _I, _P],
}
"""Each launcher's arguments; the last three (whether to launch dependently, the device's
index and its stream) `call` adds."""
ABI_VERSION = 7
"""The launchers' signature version these `_SIGNATURES` describe (csrc/common.cuh's
kAbiVersion): a library reporting another was built from other sources and is not called."""
DTYPE_CODES = {torch.bfloat16: 0, torch.float16: 1}
"""The library's codes for the 16-bit types its kernels take."""
DEPENDENT_LAUNCH_CAPABILITY = (9, 0)
"""The first compute capability with programmatic dependent launch."""
DEPENDENT_LAUNCH_ENV = "PAGODA_CUDA_DEPENDENT_LAUNCH"
"""Which kernels launch while the kernel ahead of them in the stream still runs
(programmatic dependent launch, from sm_90 on): 0 none, 1 all, or a comma list of families:
the Triton kernels' (`pagoda.kernels.triton.launch.KERNEL_FAMILIES`) and "native" (this
library's, which load their first weights before they wait for their inputs). Any named,
every kernel waits for the ones ahead. The default, DEFAULT_DEPENDENT_LAUNCH, is every
family but the Triton matmuls ("gemv"): on an H100, an 8B model's time per token (benches
WF and UN, docs/benchmarks.md) with INT4 weights 3.10 ms off, 2.95 so (2.92 with every
kernel), with bf16 weights 5.78 off, 5.80 so, 5.98 with every kernel (the Triton matmuls
launched early cost their neighbours more than the launch saves), FP8 4.11 off, 4.12 so."""
DEFAULT_DEPENDENT_LAUNCH = "elementwise,attention,reduce,native"
DEPENDENT_FAMILIES = frozenset((*KERNEL_FAMILIES, "native"))


def dependent_launch_wanted() -> frozenset[str]:
    """The kernel families PAGODA_CUDA_DEPENDENT_LAUNCH asks to launch dependently."""
    mode = os.environ.get(DEPENDENT_LAUNCH_ENV, DEFAULT_DEPENDENT_LAUNCH).strip()
    if mode in ("0", "1"):
        return DEPENDENT_FAMILIES if mode == "1" else frozenset()
    families = frozenset(f.strip() for f in mode.split(","))
    if not families <= DEPENDENT_FAMILIES:
        raise ValueError(f"{DEPENDENT_LAUNCH_ENV}={mode!r}: expected 0, 1 or families among "
                         f"{', '.join(sorted(DEPENDENT_FAMILIES))}")
    return families


@functools.cache
def dependent_families(index: int) -> frozenset[str]:
    """The kernel families launched dependently on CUDA device `index`, decided once a
    process from its capability and the variable: the Triton kernels' through
    `pagoda_cuda.triton_ops.device_launch`, this library's ("native") at each launch."""
    capable = torch.cuda.get_device_capability(index) >= DEPENDENT_LAUNCH_CAPABILITY
    return dependent_launch_wanted() if capable else frozenset()


def dependent_launch(index: int) -> bool:
    """Whether this library's kernels launch dependently on CUDA device `index`."""
    return "native" in dependent_families(index)


class NativeKernelError(RuntimeError):
    """A launcher of the library returned an error."""


def library_path() -> Path | None:
    """The built library beside this module, or None."""
    found = sorted(Path(__file__).parent.glob("_kernels*.so"))
    return found[0] if found else None


@functools.cache
def _library() -> ctypes.CDLL | str:
    """The loaded library with its launchers' signatures, or why it cannot be loaded."""
    path = library_path()
    if path is None:
        return ("pagoda-cuda was installed without its CUDA C++ kernels (nvcc was not found "
                "at install; reinstall with CUDA_HOME set)")
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        return f"cannot load {path.name}: {e}"
    version = getattr(lib, "pagoda_cuda_abi_version", None)
    built = version() if version is not None else 0  # before the version: 0
    if built != ABI_VERSION:
        return (f"{path.name} was built from other sources (launcher signatures version "
                f"{built}, this pagoda-cuda's is {ABI_VERSION}): rebuild it by reinstalling "
                "pagoda-cuda")
    for name, args in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, ctypes.c_int
    lib.pagoda_cuda_error_string.argtypes = [ctypes.c_int]
    lib.pagoda_cuda_error_string.restype = ctypes.c_char_p
    return lib


@functools.cache
def unavailable(needs: tuple[int, int] = MIN_CAPABILITY) -> str | None:
    """None where the library is loaded and the GPU has compute capability `needs` or later,
    else why not (`KernelProvider.is_available` of the providers built on it)."""
    lib = _library()
    if isinstance(lib, str):
        return lib
    if not torch.cuda.is_available():
        return "no CUDA device is visible to torch"
    capability = torch.cuda.get_device_capability()
    if capability < needs:
        return (f"compute capability {capability[0]}.{capability[1]}: these CUDA C++ kernels "
                f"need {needs[0]}.{needs[1]} or later")
    return None


def call(name: str, device: torch.device, *args: object) -> None:
    """Runs launcher `name` with `args`, then whether to launch dependently
    (`dependent_launch`), `device`'s index and PyTorch's current stream of it (the library
    links its own CUDA runtime: it sets the device before launching); raises on an
    error."""
    lib = _library()
    if isinstance(lib, str):
        raise NativeKernelError(lib)
    index = device.index if device.index is not None else torch.cuda.current_device()
    stream = torch.cuda.current_stream(index).cuda_stream
    code = getattr(lib, name)(*args, dependent_launch(index), index, stream)
    if code:
        message = lib.pagoda_cuda_error_string(code).decode()
        raise NativeKernelError(f"{name}: {message} (code {code})")


def normed_row_fits(row: Any, max_inputs: int) -> bool:
    """Whether a kernel that computes a normed row's input itself (in shared memory, at most
    `max_inputs` of it) takes `row` (a `pagoda.kernels.triton.row_input.RowInput`): a NORMED
    row of a 16-bit type, every vector contiguous, 16-byte aligned and of x's type."""
    from pagoda.kernels.triton.row_input import NORMED

    x = row.x
    vectors = [x, row.norm_weight, row.residual, row.summed]
    return (row.kind == NORMED and x.shape[0] == 1 and row.width <= max_inputs
            and x.dtype in DTYPE_CODES
            and all(v is None or (v.dtype == x.dtype and v.is_contiguous()
                                  and v.data_ptr() % 16 == 0) for v in vectors))


def row_matmul(n: int, row_fits: Callable[[Any], bool],
               kernel_row: Callable[[torch.Tensor, Any], torch.Tensor],
               linear_op: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """A fused decode layer's one-row matmul of N outputs (a
    `pagoda.kernels.triton.decode_layer.RowMatmul`) on a kernel that computes a normed row
    itself, `kernel_row(out, row)` where `row_fits(row)`; other rows' inputs run their ops'
    kernels first (`triton_ops.row_values`), then `linear_op`. It has no rotary epilogue."""
    from pagoda.kernels.triton.decode_layer import RowMatmul
    from pagoda_cuda.triton_ops import row_values

    def run(row: Any, rotary: object) -> torch.Tensor:
        assert rotary is None, "the kernel rotates nothing"
        if row_fits(row):
            return kernel_row(torch.empty((1, n), dtype=row.x.dtype, device=row.x.device), row)
        return linear_op(row_values(row))

    return RowMatmul(run, n, None)


def pointer(t: torch.Tensor | None) -> int | None:
    """A tensor's address for a launcher, None (a null pointer) for no tensor."""
    return None if t is None else t.data_ptr()


def linear(x: torch.Tensor, weight: Any, bias: torch.Tensor | None,
           fits: Callable[[torch.Tensor, Any, torch.Tensor | None], bool],
           kernel: Callable[..., torch.Tensor],
           fallback: Callable[..., torch.Tensor]) -> torch.Tensor:
    """A quantized linear op of x [..., K]: `kernel(out2, x2, weight, bias)` into a new output
    where `fits(x2, weight, bias)` holds for x's rows x2 [M, K], else `fallback(x, weight,
    bias)` (Triton's op)."""
    k, n = x.shape[-1], weight.shape[0]
    x2 = rows(x, k)
    if not fits(x2, weight, bias):
        return fallback(x, weight, bias)
    out = torch.empty((*x.shape[:-1], n), dtype=x.dtype, device=x.device)
    kernel(out.view(-1, n), x2, weight, bias)
    return out
