// The Python module `pagoda_cpu._C`: checks the tensors, runs the kernels of the chosen
// instruction set (kernels.h) across PyTorch's intra-op threads, and binds them.
#include <torch/extension.h>

#include <algorithm>
#include <string>

#include "kernels.h"

namespace pagoda_cpu {
namespace {

const Kernels* active = nullptr;

const Kernels* by_name(const std::string& isa) {
  if (isa == "avx512") return kernels_avx512();
  if (isa == "avx2") return kernels_avx2();
  if (isa == "generic") return kernels_generic();
  return nullptr;
}

// Whether this build has kernels for `isa` (the caller checks that the CPU has them).
bool has_isa(const std::string& isa) { return by_name(isa) != nullptr; }

void set_isa(const std::string& isa) {
  const Kernels* table = by_name(isa);
  TORCH_CHECK(table != nullptr, "pagoda_cpu._C has no kernels for instruction set '", isa, "'");
  active = table;
}

std::string isa() { return active ? active->isa : ""; }

const Kernels& kernels() {
  TORCH_CHECK(active != nullptr, "pagoda_cpu._C: set_isa() was not called");
  return *active;
}

WoqWeight woq_weight(const at::Tensor& codes, const at::Tensor& scales,
                     const at::Tensor& offsets, int64_t bits) {
  TORCH_CHECK(bits == 4 || bits == 8, "woq: bits must be 4 or 8, not ", bits);
  TORCH_CHECK(codes.scalar_type() == at::kByte && codes.is_contiguous() && codes.dim() == 2,
              "woq: codes must be a contiguous uint8 matrix");
  const int64_t n = codes.size(0), k = codes.size(1) * 8 / bits;
  TORCH_CHECK(k % 32 == 0, "woq: K must be a multiple of 32, not ", k);
  for (const at::Tensor* t : {&scales, &offsets})
    TORCH_CHECK(t->scalar_type() == at::kFloat && t->is_contiguous() && t->dim() == 2 &&
                    t->size(0) == n && t->size(1) > 0 && k % t->size(1) == 0 &&
                    (k / t->size(1)) % 32 == 0,
                "woq: scales and offsets must be contiguous float32 [N, groups] with groups "
                "of a multiple of 32 inputs");
  return WoqWeight{codes.data_ptr<uint8_t>(), scales.data_ptr<float>(),
                   offsets.data_ptr<float>(), n, k, k / scales.size(1), bits};
}

// Output rows per task: enough that a task reads ~64 KiB of codes.
int64_t grain(const WoqWeight& w) {
  return std::max<int64_t>(4, (int64_t(64) << 10) / std::max<int64_t>(w.k * w.bits / 8, 1));
}

at::Tensor woq_gemv(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales,
                    const at::Tensor& offsets, int64_t bits,
                    const std::optional<at::Tensor>& bias) {
  const WoqWeight w = woq_weight(codes, scales, offsets, bits);
  TORCH_CHECK(x.dim() == 2 && x.size(1) == w.k, "woq: x must be [M, ", w.k, "]");
  const at::Tensor x32 = x.to(at::kFloat).contiguous();
  at::Tensor b32;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->numel() == w.n, "woq: bias must have ", w.n, " entries");
    b32 = bias->to(at::kFloat).contiguous();
  }
  at::Tensor y = at::empty({x.size(0), w.n}, x32.options());
  const Kernels& kern = kernels();
  const float* xp = x32.data_ptr<float>();
  const float* bp = b32.defined() ? b32.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  const int64_t rows = x.size(0);
  at::parallel_for(0, w.n, grain(w), [&](int64_t n0, int64_t n1) {
    kern.woq_gemv(w, xp, rows, bp, yp, n0, n1);
  });
  return y;
}

at::Tensor woq_dequantize(const at::Tensor& codes, const at::Tensor& scales,
                          const at::Tensor& offsets, int64_t bits) {
  const WoqWeight w = woq_weight(codes, scales, offsets, bits);
  at::Tensor out = at::empty({w.n, w.k}, scales.options());
  const Kernels& kern = kernels();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, w.n, grain(w), [&](int64_t n0, int64_t n1) {
    kern.woq_dequantize(w, op, n0, n1);
  });
  return out;
}

}  // namespace
}  // namespace pagoda_cpu

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace pagoda_cpu;
  m.def("has_isa", &has_isa, "whether this build has kernels for an instruction set");
  m.def("set_isa", &set_isa, "use the kernels of an instruction set from now on");
  m.def("isa", &isa, "the instruction set in use ('' before set_isa)");
  m.def("woq_gemv", &woq_gemv, "x [M, K] times a packed 4/8-bit weight^T (+ bias): float32",
        py::arg("x"), py::arg("codes"), py::arg("scales"), py::arg("offsets"),
        py::arg("bits"), py::arg("bias") = py::none());
  m.def("woq_dequantize", &woq_dequantize, "a packed 4/8-bit weight as float32 [N, K]");
}
