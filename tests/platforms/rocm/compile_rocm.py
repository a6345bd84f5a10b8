"""Compile every shared Triton kernel variant for an AMD GPU, with pagoda-rocm's launch
parameters for that architecture, without a GPU: Triton's AMD backend lowers to AMDGCN
and links an HSACO code object with its bundled LLVM, no ROCm install needed.

Usage: python compile_rocm.py ARCH (e.g. gfx942). Run in a process without
TRITON_INTERPRET. Prints one line per variant with the compiler's register use, scratch
(spilled) bytes and waves per SIMD; exits non-zero on the first failure.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import time
from pathlib import Path
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from pagoda.kernels.triton.attention_kernels import _attention_kernel, _reduce_splits_kernel
from pagoda.kernels.triton.gemv import _gemv_kernel
from pagoda.kernels.triton.launch import LaunchParams, TritonLaunch
from pagoda_rocm.arch import wavefront_size
from pagoda_rocm.launch import launch_for_arch

_SM90 = Path(__file__).parents[2] / "kernels" / "compile_sm90.py"


def _sm90_module() -> Any:
    """The sm_90 compile script: the kernel variants and their signatures are shared."""
    spec = importlib.util.spec_from_file_location("compile_sm90", _SM90)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def family_of(fn: Any) -> str:
    """The kernel's family, as `TritonLaunch` names its parameters."""
    if fn is _attention_kernel:
        return "attention"
    if fn is _reduce_splits_kernel:
        return "reduce"
    if fn is _gemv_kernel:
        return "gemv"
    return "elementwise"


def params_for(fn: Any, launch: TritonLaunch) -> LaunchParams:
    return getattr(launch, family_of(fn))


def _stat(amdgcn: str, name: str) -> int:
    """A number from the kernel statistics LLVM prints in the AMDGCN assembly."""
    found = re.search(rf"^\s*; {name}: (\d+)", amdgcn, re.M)
    assert found, f"no {name} in the AMDGCN assembly"
    return int(found.group(1))


def main(arch: str) -> int:
    sm90 = _sm90_module()
    launch = launch_for_arch(arch)
    target = GPUTarget("hip", arch, wavefront_size(arch))
    for label, fn, data, consts, wide in sm90.VARIANTS:
        options = params_for(fn, launch).kwargs()
        if fn is _gemv_kernel:  # its K loop is pipelined as deep as the launch says
            consts = {**consts, "STAGES": options["num_stages"]}
        if "PDL" in fn.arg_names:  # AMD GPUs have no dependent launch (launch.dependency())
            consts = {**consts, **launch.dependency(family_of(fn))}
        start = time.perf_counter()
        try:
            compiled = triton.compile(ASTSource(fn, sm90._signature(fn, data, consts, wide),
                                                consts), target=target, options=options)
        except Exception as exc:
            print(f"FAILED {label}: {exc}")
            return 1
        meta, amdgcn = compiled.metadata, compiled.asm["amdgcn"]
        print(f"ok {label}: {time.perf_counter() - start:.1f}s, num_warps={meta.num_warps} "
              f"num_stages={meta.num_stages} warp_size={meta.warp_size}, "
              f"vgprs={_stat(amdgcn, 'NumVgprs')} scratch={_stat(amdgcn, 'ScratchSize')} "
              f"occupancy={_stat(amdgcn, 'Occupancy')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
