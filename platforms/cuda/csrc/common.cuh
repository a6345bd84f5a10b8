// What pagoda-cuda's CUDA C++ kernels share: the launchers' error codes, the 16-bit types'
// conversions, dependent launch and how a block's lanes split a 16-row tile of the weight.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace pagoda_cuda {

// The version of the launchers' C signatures (pagoda_cuda.native.ABI_VERSION must equal it):
// bump it with any change to an exported launcher's parameters, so that Python never calls
// a library built from other sources with arguments laid out for this one.
constexpr int kAbiVersion = 7;

// Error codes of the launchers besides CUDA's own (cudaError_t values are below 1000);
// pagoda_cuda_error_string (errors.cu) names each.
enum Error { kBadShape = 1001, kBadType = 1002 };

// The launchers' dtype argument.
enum Dtype { kBfloat16 = 0, kFloat16 = 1 };

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float(float v) { return __float2half_rn(v); }

// The two 16-bit values of a 32-bit word (the low half first) as floats.
__device__ __forceinline__ float2 unpack2(uint32_t w, __nv_bfloat16) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}
__device__ __forceinline__ float2 unpack2(uint32_t w, __half) {
  __half2 h;
  memcpy(&h, &w, sizeof(h));
  return __half22float2(h);
}

// Eight 16-bit values of a 16-byte vector as floats, and floats rounded back into one. The
// vector comes by value, its four words taken apart in registers: given its address, the
// compiler loads a vector in memory as eight 16-bit loads.
template <typename T>
__device__ __forceinline__ void unpack8(const uint4 v, float (&f)[8]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 pair = unpack2(words[i], T{});
    f[2 * i] = pair.x;
    f[2 * i + 1] = pair.y;
  }
}

template <typename T>
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  uint4 v;
  T* h = reinterpret_cast<T*>(&v);
#pragma unroll
  for (int i = 0; i < 8; ++i) h[i] = from_float<T>(f[i]);
  return v;
}

// `op` (associative) over every thread's `v` of a block of THREADS threads, returned to all
// of them, in the same order in each (so every thread gets the same float). Call it once a
// kernel (its shared memory is the call's own), from every thread.
template <int THREADS, typename Op>
__device__ __forceinline__ float block_all_reduce(float v, Op op) {
  __shared__ float warp_values[THREADS / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  if (threadIdx.x % 32 == 0) warp_values[threadIdx.x / 32] = v;
  __syncthreads();
  float total = warp_values[0];
#pragma unroll
  for (int w = 1; w < THREADS / 32; ++w) total = op(total, warp_values[w]);
  return total;
}

// Programmatic dependent launch (sm_90 on): a kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start while the kernel ahead of it in
// the stream still runs; until it calls this it may read only what no kernel of the step
// writes (its weights). Returns once the kernels ahead have completed and their writes are
// visible; nothing to wait for on older devices or without the attribute.
__device__ __forceinline__ void wait_for_inputs() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Launches `kernel` with `shared_bytes` of dynamic shared memory on `stream`, dependently
// (see wait_for_inputs) where `dependent`.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                          cudaStream_t stream, bool dependent, Args... args) {
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = dependent ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

// c += a b by mma.sync m16n8k16 with float16 operands (a: 16 x 16, row-major fragments; b:
// 16 x 8, column-major) and float32 accumulators.
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

constexpr int kMmaRows = 16;  // weight rows a block: the MMA's M

// A lane's share of a block of WARPS warps that multiply TILES tiles of kMmaRows weight rows,
// WARPS / TILES warps a tile (warp w in tile w / (WARPS / TILES)), and split `chunks` steps
// of K between a tile's warps, each warp a contiguous range [begin, end). Lane (g, t) =
// (lane / 4, lane % 4) holds rows g and g + 8 of the MMA's fragments; `row` is the weight
// row of its g.
struct LaneTile {
  int warp, g, t, begin, end;
  int64_t row;
};

template <int WARPS, int TILES = 1>
__device__ __forceinline__ LaneTile lane_tile(int chunks) {
  static_assert(WARPS % TILES == 0, "whole warps a tile");
  constexpr int kTileWarps = WARPS / TILES;
  LaneTile tile;
  tile.warp = threadIdx.x / 32;
  tile.g = threadIdx.x % 32 / 4;
  tile.t = threadIdx.x % 4;
  // (With one tile, every warp is the tile's: no division where the block has no more warps.)
  const int tile_index = TILES == 1 ? 0 : tile.warp / kTileWarps;
  const int tile_warp = TILES == 1 ? tile.warp : tile.warp % kTileWarps;
  tile.row = (static_cast<int64_t>(blockIdx.x) * TILES + tile_index) * kMmaRows + tile.g;
  const int per_warp = (chunks + kTileWarps - 1) / kTileWarps;
  tile.begin = tile_warp * per_warp;
  tile.end = min(chunks, tile.begin + per_warp);
  return tile;
}

}  // namespace pagoda_cuda
