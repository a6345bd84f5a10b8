"""Launch parameters of the shared Triton kernels on AMD GPUs, by architecture.

Triton's "warp" is a hardware wavefront: 64 threads on CDNA (MI200/MI300/MI350), 32 on
RDNA. Warps are chosen here by threads per program:

- row and element kernels: 128 threads (2 wavefronts on CDNA), what 4 warps are on CUDA;
- attention: 256 threads (4 wavefronts on CDNA, 8 on RDNA), its key loop unpipelined
  (num_stages=1);
- matmuls of a few rows (gemv): 256 threads, its K loop double-buffered (num_stages=2),
  whatever tiles the kernel picks for the shape.

Compiled for gfx942, gfx950 and gfx1201 without a GPU (tests/platforms/rocm), the choices
keep every kernel free of register spills, except the float32 attention on RDNA:
Triton's defaults (4 warps, 2 stages) spill the attention kernel on gfx1201, and
2 stages drop the float32 attention to 1 wave per SIMD on gfx942. A `waves_per_eu=2`
hint made the gfx942 prefill attention spill and lowered the decode attention's
occupancy on gfx950, so it is not set. Speed has not been measured on AMD hardware.
"""

from __future__ import annotations

from pagoda.kernels.triton.launch import LaunchParams, TritonLaunch
from pagoda_rocm.arch import wavefront_size

ATTENTION_THREADS = 256
GEMV_THREADS = 256
ROW_THREADS = 128


def launch_for_arch(arch: str) -> TritonLaunch:
    """The launch parameters for GPUs of gfx target `arch` (e.g. "gfx942:sramecc+")."""
    wavefront = wavefront_size(arch)
    rows = LaunchParams(num_warps=ROW_THREADS // wavefront)
    return TritonLaunch(
        attention=LaunchParams(num_warps=ATTENTION_THREADS // wavefront, num_stages=1),
        reduce=rows,
        elementwise=rows,
        gemv=LaunchParams(num_warps=GEMV_THREADS // wavefront, num_stages=2),
    )
