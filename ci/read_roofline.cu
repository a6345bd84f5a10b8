// The read roofline of one matmul launch: how long a kernel that only reads a weight takes,
// per Llama-3-8B matmul shape and weight format, on this GPU. A one-row matmul that streams
// its weight once cannot beat this in one launch; docs/benchmarks.md sets the INT4 and bf16
// one-row kernels beside it.
//
//     nvcc -O3 -std=c++17 -arch=sm_90 ci/read_roofline.cu -o /tmp/read_roofline
//     /tmp/read_roofline          (or: bash ci/gpu.sh roofline)
//
// Each shape's weight bytes are read by blocks of 256 threads, a block per 16 weight rows
// (the kernels' tile), in these patterns:
//   flat:   each warp load covers 512 contiguous bytes of the block's rows;
//   tile:   the pattern of csrc/woq_mma.cu and csrc/fp8_row.cu: lane (g, t) loads 16 bytes
//           of rows g and g + 8, a step of 64 bytes a row, the block's 8 warps splitting K
//           (tile16: 16 warps, 512 threads, as both kernels launch where blocks are few);
//   wide:   as tile, but each lane loads 64 contiguous bytes of each of its rows a step
//           (four 16-byte loads), a step of 256 bytes a row.
// Launches are timed back to back in a stream, cycling through enough copies of the weight
// to overflow L2 (every launch reads HBM, as a model's layers do); a launch's time includes
// the ramp up and down of its blocks.

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr int kThreads = 256;
constexpr int kRows = 16;   // weight rows a block
constexpr int kWarps = kThreads / 32;
constexpr int kLaunches = 40;

__device__ __forceinline__ uint32_t fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

// Whatever is read reaches a store no launch takes (the value is never the sentinel), so the
// compiler keeps every load.
__device__ __forceinline__ void keep(uint32_t acc, uint32_t* sink) {
  if (acc == 0x9e3779b9u) *sink = acc;
}

__global__ void __launch_bounds__(kThreads) flat(const uint4* weight, int row_vectors,
                                                 uint32_t* sink) {
  const uint4* tile = weight + static_cast<int64_t>(blockIdx.x) * kRows * row_vectors;
  uint32_t acc = 0;
  for (int v = threadIdx.x; v < kRows * row_vectors; v += kThreads) acc ^= fold(__ldcs(tile + v));
  keep(acc, sink);
}

template <int WARPS>
__global__ void __launch_bounds__(WARPS * 32) tile(const uint4* weight, int row_vectors,
                                                   uint32_t* sink) {
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRows + g;
  const uint4* a = weight + row * row_vectors + t;
  const uint4* b = a + 8 * row_vectors;
  const int steps = row_vectors / 4, per_warp = (steps + WARPS - 1) / WARPS;
  const int begin = warp * per_warp, end = min(steps, begin + per_warp);
  uint32_t acc = 0;
  for (int s = begin; s < end; ++s) acc ^= fold(__ldcs(a + 4 * s)) ^ fold(__ldcs(b + 4 * s));
  keep(acc, sink);
}

__global__ void __launch_bounds__(kThreads) wide(const uint4* weight, int row_vectors,
                                                 uint32_t* sink) {
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRows + g;
  const uint4* a = weight + row * row_vectors + 4 * t;
  const uint4* b = a + 8 * row_vectors;
  const int steps = row_vectors / 16, per_warp = (steps + kWarps - 1) / kWarps;
  const int begin = warp * per_warp, end = min(steps, begin + per_warp);
  uint32_t acc = 0;
  for (int s = begin; s < end; ++s) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc ^= fold(__ldcs(a + 16 * s + i)) ^ fold(__ldcs(b + 16 * s + i));
  }
  keep(acc, sink);
}

using Kernel = void (*)(const uint4*, int, uint32_t*);

// Microseconds a launch of `kernel` (blocks of `threads`) over [rows, row_bytes] weights
// takes.
double time_launches(Kernel kernel, int threads, const std::vector<uint4*>& copies, int rows,
                     int row_bytes, uint32_t* sink) {
  const int row_vectors = row_bytes / 16;
  for (uint4* w : copies) kernel<<<rows / kRows, threads>>>(w, row_vectors, sink);
  cudaEvent_t start, end;
  cudaEventCreate(&start);
  cudaEventCreate(&end);
  cudaEventRecord(start);
  for (int i = 0; i < kLaunches; ++i) {
    kernel<<<rows / kRows, threads>>>(copies[i % copies.size()], row_vectors, sink);
  }
  cudaEventRecord(end);
  cudaEventSynchronize(end);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, start, end);
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  return ms * 1e3 / kLaunches;
}

struct Shape {
  const char* name;
  int rows, inputs;
};

struct Format {
  const char* name;
  double bytes_per_weight;  // the weight's codes (or values) alone
};

}  // namespace

int main() {
  const Shape shapes[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096},
                          {"down", 4096, 14336}};
  const Format formats[] = {{"int4", 0.5}, {"fp8", 1.0}, {"bf16", 2.0}};
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  uint32_t* sink;
  cudaMalloc(&sink, sizeof(uint32_t));
  std::printf("%s, L2 %d MB\n", prop.name, prop.l2CacheSize >> 20);
  struct Pattern {
    const char* name;
    Kernel kernel;
    int threads;
  };
  const Pattern patterns[] = {{"flat", flat, kThreads}, {"tile", tile<kWarps>, kThreads},
                              {"tile16", tile<2 * kWarps>, 2 * kThreads},
                              {"wide", wide, kThreads}};
  std::printf("%-8s %-5s %9s", "shape", "fmt", "MB");
  for (const Pattern& p : patterns) std::printf(" %7s us TB/s", p.name);
  std::printf("\n");
  for (const Format& format : formats) {
    for (const Shape& shape : shapes) {
      const int row_bytes = static_cast<int>(shape.inputs * format.bytes_per_weight);
      const size_t bytes = static_cast<size_t>(shape.rows) * row_bytes;
      std::vector<uint4*> copies(4 * prop.l2CacheSize / bytes + 2);
      for (uint4*& w : copies) {
        if (cudaMalloc(&w, bytes) != cudaSuccess) return 1;
        cudaMemset(w, 1, bytes);
      }
      std::printf("%-8s %-5s %9.1f", shape.name, format.name, bytes / 1e6);
      for (const Pattern& p : patterns) {
        const double us = time_launches(p.kernel, p.threads, copies, shape.rows, row_bytes, sink);
        std::printf(" %10.2f %5.2f", us, bytes / us / 1e6);
      }
      std::printf("\n");
      for (uint4* w : copies) cudaFree(w);
    }
  }
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    std::fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(error));
    return 1;
  }
  return 0;
}
