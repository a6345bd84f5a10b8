"""Builds pagoda-cpu's native kernels (`csrc/`) into `pagoda_cpu._C`, when it can.

The extension needs PyTorch's headers at build time (`pip install --no-build-isolation`,
as the Makefile installs it, or a wheel built beside torch). Without torch, or when the
compiler fails, the package installs without it and runs on PyTorch's own ops (the
plugin logs it once: `pagoda_cpu.csrc`). The name of the project, its dependencies and
entry points are in pyproject.toml.
"""

from __future__ import annotations

import sys

from setuptools import setup

SOURCES = ["csrc/ops.cpp", "csrc/kernels_avx512.cpp", "csrc/kernels_avx2.cpp",
           "csrc/kernels_generic.cpp"]
HEADERS = ["csrc/kernels.h", "csrc/kernels.inc", "csrc/vec.h"]
FLAGS = ["-O3", "-ffp-contract=fast"]


def _extensions() -> tuple[list, dict]:
    try:
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except ImportError as e:  # e.g. an isolated build: no torch, no native kernels
        print(f"pagoda-cpu: building without native kernels ({e})", file=sys.stderr)
        return [], {}

    class OptionalBuild(BuildExtension):
        """A failed build of the kernels leaves the package installable without them."""

        def run(self) -> None:
            try:
                super().run()
            except Exception as e:  # noqa: BLE001 - any build failure: no native kernels
                print(f"pagoda-cpu: native kernels not built ({e})", file=sys.stderr)

    ext = CppExtension("pagoda_cpu._C", SOURCES, extra_compile_args=FLAGS, depends=HEADERS,
                       optional=True)
    return [ext], {"build_ext": OptionalBuild}


ext_modules, cmdclass = _extensions()
setup(ext_modules=ext_modules, cmdclass=cmdclass)
