// What the library says of itself: its launchers' signature version and error messages.
#include <cuda_runtime.h>

#include "common.cuh"

extern "C" const char* pagoda_cuda_error_string(int code) {
  switch (code) {
    case pagoda_cuda::kBadShape:
      return "unsupported shape or launch";
    case pagoda_cuda::kBadType:
      return "unsupported dtype";
    default:
      return cudaGetErrorString(static_cast<cudaError_t>(code));
  }
}

extern "C" int pagoda_cuda_abi_version() { return pagoda_cuda::kAbiVersion; }
