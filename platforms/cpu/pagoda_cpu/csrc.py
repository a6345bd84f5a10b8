"""pagoda-cpu's native kernels: `platforms/cpu/csrc`, built into `pagoda_cpu._C` when the
package is installed (setup.py). One build holds the kernels for each instruction set
(AVX-512 with VNNI, AVX-512, AVX2 and a portable one); the best this CPU runs is chosen
once, from its flags.

PAGODA_CPU_ISA ("avx512_vnni", "avx512", "avx2" or "generic") picks one instead, e.g. to
run the AVX2 path on an AVX-512 machine; without it, ATEN_CPU_CAPABILITY ("avx512", "avx2",
"default"), PyTorch's own override, is honoured the same way. Naming an instruction set
this CPU lacks is an error. Where the kernels were not built (no compiler at install,
an isolated build without torch), the providers that need them report themselves
unavailable and the CPU runs on PyTorch's ops; that is logged once.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
from types import ModuleType

from pagoda_cpu.host import cpu_flags

logger = logging.getLogger(__name__)

ISA_ENV = "PAGODA_CPU_ISA"
ATEN_ISA_ENV = "ATEN_CPU_CAPABILITY"
_AVX512 = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "fma", "f16c"})
ISA_FLAGS: dict[str, frozenset[str]] = {
    "avx512_vnni": _AVX512 | {"avx512_vnni"},
    "avx512": _AVX512,
    "avx2": frozenset({"avx2", "fma", "f16c"}),
    "generic": frozenset(),
}
"""Each build's instruction set, best first, as the /proc/cpuinfo flags it needs
(the targets its sources are compiled for: csrc/kernels_<isa>.cpp)."""
_ATEN_NAMES = {"avx512": "avx512", "avx2": "avx2", "default": "generic"}


def cpu_isas() -> tuple[str, ...]:
    """The instruction sets of the builds this CPU can run, best first."""
    flags = cpu_flags()
    return tuple(isa for isa, needs in ISA_FLAGS.items() if needs <= flags)


def requested_isa() -> str | None:
    """The instruction set the environment asks for (PAGODA_CPU_ISA, else PyTorch's
    ATEN_CPU_CAPABILITY where it names one of ours), or None: the best this CPU runs."""
    value = os.environ.get(ISA_ENV, "").strip().lower()
    if value:
        if value not in ISA_FLAGS:
            raise ValueError(f"{ISA_ENV}={value!r}: expected one of {', '.join(ISA_FLAGS)}")
        return value
    return _ATEN_NAMES.get(os.environ.get(ATEN_ISA_ENV, "").strip().lower())


def use_isa(module: ModuleType, isa: str) -> None:
    """Run `module`'s kernels for `isa` from now on (ValueError: this CPU or build lacks it)."""
    if isa not in cpu_isas():
        missing = sorted(ISA_FLAGS.get(isa, frozenset({isa})) - cpu_flags())
        raise ValueError(f"this CPU cannot run the {isa} kernels (missing flags: "
                         f"{', '.join(missing)})")
    if not module.has_isa(isa):
        raise ValueError(f"pagoda_cpu._C was built without {isa} kernels (compiler or target)")
    module.set_isa(isa)


@functools.cache
def native() -> ModuleType | None:
    """`pagoda_cpu._C` with its instruction set chosen, or None where it was not built."""
    import torch  # noqa: F401 - loads the libraries the extension links against

    try:
        kernels = importlib.import_module("pagoda_cpu._C")
    except ImportError as e:
        logger.warning("pagoda-cpu's native kernels are not built (%s): the CPU runs on "
                       "PyTorch's ops (reinstall pagoda-cpu with torch and a C++ compiler "
                       "present: pip install --no-build-isolation)", e)
        return None
    isa = requested_isa()
    if isa is None:
        isa = next(i for i in cpu_isas() if kernels.has_isa(i))
    use_isa(kernels, isa)
    logger.info("pagoda-cpu's native kernels: %s", isa)
    return kernels


def unavailable() -> str | None:
    """None where the native kernels run, else why not (a KernelProvider's is_available)."""
    return None if native() is not None else "pagoda-cpu's native kernels are not built"
