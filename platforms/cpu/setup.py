"""Builds pagoda-cpu's native kernels (`csrc/`) into `pagoda_cpu._C`, when it can.

The extension needs PyTorch's headers at build time (`pip install --no-build-isolation`,
as the Makefile installs it, or a wheel built beside torch). Without torch, or when the
compiler fails, the package installs without it and runs on PyTorch's own ops (the
plugin logs it once: `pagoda_cpu.csrc`). The kernels are compiled once per instruction
set, each file with its own target flags (ISA_SOURCES), and linked into the one module,
which picks among them at run time. The name of the project, its dependencies and entry
points are in pyproject.toml.
"""

from __future__ import annotations

import platform
import sys

from setuptools import setup

X86 = platform.machine().lower() in ("x86_64", "amd64")
AVX512 = ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma", "-mf16c"]
ISA_SOURCES = {
    "csrc/kernels_avx512_vnni.cpp": [*AVX512, "-mavx512vnni"] if X86 else [],
    "csrc/kernels_avx512.cpp": AVX512 if X86 else [],
    "csrc/kernels_avx2.cpp": ["-mavx2", "-mfma", "-mf16c"] if X86 else [],
    "csrc/kernels_generic.cpp": [],
}
"""Each build's source and flags (off x86 the AVX files compile to empty stubs)."""
HEADERS = ["csrc/kernels.h", "csrc/kernels.inc", "csrc/woq_q8.inc", "csrc/vec.h",
           "csrc/decode_layer.h"]
FLAGS = ["-O3", "-g0", "-ffp-contract=fast", "-std=c++17"]
OPENMP = ["-fopenmp"]
"""ops.cpp only: ATen's parallel_for is a header template that splits work across
threads only where the including file is compiled with OpenMP (without it, every native
kernel ran on one thread). Not linked: the OpenMP calls resolve to the runtime PyTorch
loads (its own libgomp), so the kernels share PyTorch's thread pool and thread count."""


def _extensions() -> tuple[list, dict]:
    try:
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except ImportError as e:  # e.g. an isolated build: no torch, no native kernels
        print(f"pagoda-cpu: building without native kernels ({e})", file=sys.stderr)
        return [], {}

    class OptionalBuild(BuildExtension):
        """Compiles the per-instruction-set kernels with their flags; a failed build
        leaves the package installable without them."""

        def build_extension(self, ext) -> None:
            ext.extra_objects = [
                obj for source, flags in ISA_SOURCES.items()
                for obj in self.compiler.compile([source], output_dir=self.build_temp,
                                                 extra_postargs=FLAGS + flags)]
            super().build_extension(ext)

        def run(self) -> None:
            try:
                super().run()
            except Exception as e:  # noqa: BLE001 - any build failure: no native kernels
                print(f"pagoda-cpu: native kernels not built ({e})", file=sys.stderr)

    ext = CppExtension("pagoda_cpu._C", ["csrc/ops.cpp"], extra_compile_args=FLAGS + OPENMP,
                       depends=HEADERS + list(ISA_SOURCES), optional=True)
    return [ext], {"build_ext": OptionalBuild}


ext_modules, cmdclass = _extensions()
setup(ext_modules=ext_modules, cmdclass=cmdclass)
