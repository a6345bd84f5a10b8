"""Builds pagoda-cuda's CUDA C++ kernels (`csrc/`) into `pagoda_cuda/_kernels*.so`, when it can.

The library is plain CUDA (no Python or PyTorch headers): `pagoda_cuda.native` loads it
with ctypes and launches on PyTorch's current stream. It is compiled with `nvcc` (from
$CUDA_HOME, else the PATH) for the architectures in PAGODA_CUDA_ARCHS (default ARCHS), so a
wheel built here needs no compiler where it runs. Without nvcc, or when it fails, the
package installs without the library and the GPUs run the Triton kernels alone (the
providers that need it report themselves unavailable, with the reason). The project's
name, dependencies and entry points are in pyproject.toml.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCES = ["csrc/woq_mma.cu", "csrc/fp8_row.cu", "csrc/errors.cu"]
ARCHS = "80;86;89;90"
"""Compute capabilities compiled for (machine code for each, PTX of the last): mma.sync
with bfloat16 needs 8.0."""
FLAGS = ["-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-lineinfo"]


def nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").is_file():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def arch_flags(archs: str) -> list[str]:
    caps = [a.strip() for a in archs.replace(",", ";").split(";") if a.strip()]
    flags = [f"-gencode=arch=compute_{c},code=sm_{c}" for c in caps]
    return flags + [f"-gencode=arch=compute_{caps[-1]},code=compute_{caps[-1]}"]


class BuildCudaKernels(build_ext):
    """Compiles each CUDA library with nvcc; a missing nvcc or a failed build leaves the
    package installable without it."""

    def build_extension(self, ext: Extension) -> None:
        compiler = nvcc()
        if compiler is None:
            print("pagoda-cuda: nvcc not found; building without CUDA C++ kernels",
                  file=sys.stderr)
            return
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        archs = arch_flags(os.environ.get("PAGODA_CUDA_ARCHS", ARCHS))
        command = [compiler, *FLAGS, *archs, *ext.sources, "-o", str(target)]
        try:
            subprocess.run(command, check=True)
        except (OSError, subprocess.CalledProcessError) as e:
            print(f"pagoda-cuda: CUDA C++ kernels not built ({e})", file=sys.stderr)


if __name__ == "__main__":  # setuptools runs it so; tests import the flags above
    setup(ext_modules=[Extension("pagoda_cuda._kernels", SOURCES, optional=True)],
          cmdclass={"build_ext": BuildCudaKernels})
