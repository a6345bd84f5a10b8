// The Python module `pagoda_cpu._C`: checks the tensors, runs the kernels of the chosen
// instruction set (kernels.h) across PyTorch's intra-op threads, and binds them.
#include <torch/extension.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "kernels.h"

namespace pagoda_cpu {
namespace {

const Kernels* active = nullptr;

const Kernels* by_name(const std::string& isa) {
  if (isa == "avx512_vnni") return kernels_avx512_vnni();
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

// How many tasks at::parallel_for splits [0, n) into at this grain: more than one where
// PyTorch has several threads, if this file was built with the threading it needs
// (setup.py's OPENMP); the tests check it.
int64_t parallel_tasks(int64_t n, int64_t grain) {
  std::atomic<int64_t> tasks{0};
  at::parallel_for(0, n, grain, [&](int64_t, int64_t) { ++tasks; });
  return tasks.load();
}

const Kernels& kernels() {
  TORCH_CHECK(active != nullptr, "pagoda_cpu._C: set_isa() was not called");
  return *active;
}

// `t` in dtype `st`, contiguous, without a dispatched call where it already is (a decode
// step makes ~10 native calls a layer: each PyTorch call around them costs as much as
// the kernel of a one-row norm).
at::Tensor dense(const at::Tensor& t, at::ScalarType st) {
  if (t.scalar_type() == st && t.is_contiguous()) return t;
  return t.to(st).contiguous();
}

// `t` as dtype `st` (itself where it already is).
at::Tensor as_type(const at::Tensor& t, at::ScalarType st) {
  return t.scalar_type() == st ? t : t.to(st);
}

// `out` [rows, d] as x's shape and dtype (itself for a 2-D x of its dtype).
at::Tensor like_x(const at::Tensor& out, const at::Tensor& x, at::IntArrayRef shape) {
  if (x.dim() == 2 && out.scalar_type() == x.scalar_type()) return out;
  return out.view(shape).to(x.scalar_type());
}

WoqWeight woq_weight(const at::Tensor& codes, const at::Tensor& scales,
                     const at::Tensor& offsets, int64_t bits) {
  TORCH_CHECK(bits == 4 || bits == 8, "woq: bits must be 4 or 8, not ", bits);
  TORCH_CHECK(codes.scalar_type() == at::kByte && codes.is_contiguous() && codes.dim() == 2,
              "woq: codes must be a contiguous uint8 matrix");
  const int64_t n = codes.size(0), k = codes.size(1) * 8 / bits;
  TORCH_CHECK(k % 32 == 0, "woq: K must be a multiple of 32, not ", k);
  const bool symmetric = offsets.numel() == 0;  // no offsets: symmetric codes (WoqWeight)
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.is_contiguous() &&
                  scales.dim() == 2 && scales.size(0) == n && scales.size(1) > 0 &&
                  k % scales.size(1) == 0,
              "woq: scales must be contiguous float32 [N, groups]");
  TORCH_CHECK(symmetric || (offsets.scalar_type() == at::kFloat && offsets.is_contiguous() &&
                            offsets.sizes() == scales.sizes()),
              "woq: offsets must be contiguous float32 shaped as the scales, or empty "
              "(symmetric codes)");
  const int64_t group = k / scales.size(1);
  int64_t shift = 0;
  while ((int64_t(32) << shift) < group) ++shift;
  TORCH_CHECK((int64_t(32) << shift) == group, "woq: groups of ", group,
              " inputs are not 32 times a power of two");
  return WoqWeight{codes.data_ptr<uint8_t>(), scales.data_ptr<float>(),
                   symmetric ? nullptr : offsets.data_ptr<float>(), n, k, shift, bits};
}

// Output rows per task: enough that a task reads ~64 KiB of codes.
int64_t grain(const WoqWeight& w) {
  return std::max<int64_t>(4, (int64_t(64) << 10) / std::max<int64_t>(w.k * w.bits / 8, 1));
}

// x rounded to int8 blocks of 32 inputs (a weight's act_block; woq_q8.inc), as the kernels
// take it.
struct Q8Buffers {
  std::vector<int8_t> q;
  std::vector<float> d, sums;
  Q8Rows rows() const { return {q.data(), d.data(), sums.data()}; }
};

Q8Buffers round_rows(const Kernels& kern, const float* x, int64_t rows, const WoqWeight& w) {
  const int64_t blocks = w.k / 32, groups = blocks >> w.group_shift;
  Q8Buffers b{std::vector<int8_t>(rows * w.k), std::vector<float>(rows * blocks),
              std::vector<float>(rows * groups)};
  at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / w.k), [&](int64_t r0, int64_t r1) {
    kern.quantize_q8(x, w.k, w.group_shift, b.q.data(), b.d.data(), b.sums.data(), r0, r1);
  });
  return b;
}

// x [M, K] times the packed weight^T (+ bias), float32: by the GEMV kernel (few rows:
// output rows split across threads) or the GEMM one (many: whole tiles of output rows).
// act_block 32: x rounded to int8 blocks first (the GEMV kernel multiplies the integers,
// the GEMM one their float values); 0: x as it is.
at::Tensor woq_product(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales,
                       const at::Tensor& offsets, int64_t bits,
                       const std::optional<at::Tensor>& bias, bool gemm, int64_t act_block) {
  const WoqWeight w = woq_weight(codes, scales, offsets, bits);
  TORCH_CHECK(act_block == 0 || act_block == 32,
              "woq: act_block must be 0 (activations as they are) or 32, not ", act_block);
  TORCH_CHECK(x.dim() == 2 && x.size(1) == w.k, "woq: x must be [M, ", w.k, "]");
  at::Tensor x32 = dense(x, at::kFloat);
  at::Tensor b32;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->numel() == w.n, "woq: bias must have ", w.n, " entries");
    b32 = dense(*bias, at::kFloat);
  }
  at::Tensor y = at::empty({x.size(0), w.n}, x32.options());
  const Kernels& kern = kernels();
  const float* bp = b32.defined() ? b32.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  const int64_t rows = x.size(0);
  if (act_block) {
    const Q8Buffers q8 = round_rows(kern, x32.data_ptr<float>(), rows, w);
    if (!gemm) {
      const Q8Rows xq = q8.rows();
      at::parallel_for(0, w.n, grain(w), [&](int64_t n0, int64_t n1) {
        kern.woq_gemv_q8(w, xq, rows, bp, yp, n0, n1);
      });
      return y;
    }
    x32 = at::empty({rows, w.k}, x32.options());  // the rounded values, for the GEMM kernel
    float* xr = x32.data_ptr<float>();
    at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / w.k), [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0 * w.k; i < r1 * w.k; ++i) xr[i] = float(q8.q[i]) * q8.d[i / 32];
    });
  }
  const float* xp = x32.data_ptr<float>();
  if (!gemm) {
    // The GEMV's group sums of x, where it takes them: not for symmetric 8-bit codes,
    // whose offset term is 0 (offset_term in kernels.inc).
    std::vector<float> sums;
    const bool takes_sums = kern.group_sums && !(w.offsets == nullptr && w.bits == 8);
    if (takes_sums) {
      sums.resize(rows * ((w.k / 32) >> w.group_shift));
      kern.group_sums(xp, rows, w.k, w.group_shift, sums.data());
    }
    const float* xsums = takes_sums ? sums.data() : nullptr;
    at::parallel_for(0, w.n, grain(w), [&](int64_t n0, int64_t n1) {
      kern.woq_gemv(w, xp, xsums, rows, bp, yp, n0, n1);
    });
    return y;
  }
  // Each thread a run of whole tiles, with its own tile buffer.
  const int64_t tile = kern.gemm_tile_n, tiles = (w.n + tile - 1) / tile;
  at::parallel_for(0, tiles, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> wbuf(tile * w.k);
    kern.woq_gemm(w, xp, rows, bp, yp, t0 * tile, std::min(t1 * tile, w.n), wbuf.data());
  });
  return y;
}

at::Tensor woq_gemv(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales,
                    const at::Tensor& offsets, int64_t bits,
                    const std::optional<at::Tensor>& bias, int64_t act_block) {
  return woq_product(x, codes, scales, offsets, bits, bias, false, act_block);
}

at::Tensor woq_gemm(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& scales,
                    const at::Tensor& offsets, int64_t bits,
                    const std::optional<at::Tensor>& bias, int64_t act_block) {
  return woq_product(x, codes, scales, offsets, bits, bias, true, act_block);
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

// Activations as the kernels take them: float32 and bfloat16 as they are, others (float16)
// through float32; `rows2d` views x [..., d] as [rows, d] with contiguous rows.
Dtype kernel_dtype(const at::Tensor& x) {
  return x.scalar_type() == at::kBFloat16 ? Dtype::kBFloat16 : Dtype::kFloat32;
}

at::Tensor rows2d(const at::Tensor& x, at::ScalarType dtype) {
  at::Tensor t = as_type(x, dtype);
  if (t.dim() != 2) t = t.reshape({-1, x.size(-1)});
  return t.stride(1) == 1 ? t : t.contiguous();
}

at::ScalarType kernel_scalar_type(const at::Tensor& x) {
  return x.scalar_type() == at::kBFloat16 ? at::kBFloat16 : at::kFloat;
}

// Rows per task of an elementwise kernel: ~16K values.
int64_t row_grain(int64_t width) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(width, 1)); }

std::tuple<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x,
                                                const std::optional<at::Tensor>& residual,
                                                const at::Tensor& weight, double eps) {
  const auto st = kernel_scalar_type(x);
  const int64_t d = x.size(-1);
  const at::Tensor x2 = rows2d(x, st);
  at::Tensor r2, summed;
  if (residual.has_value()) {
    TORCH_CHECK(residual->sizes() == x.sizes(), "fused_add_rms_norm: residual must be shaped as x");
    r2 = rows2d(*residual, st);
    summed = at::empty(x2.sizes(), x2.options());
  }
  const at::Tensor w = dense(weight, at::kFloat);
  TORCH_CHECK(w.numel() == d, "rms_norm: weight must have ", d, " entries");
  at::Tensor out = at::empty(x2.sizes(), x2.options());
  const Kernels& kern = kernels();
  const Dtype dt = kernel_dtype(x2);
  at::parallel_for(0, x2.size(0), row_grain(d), [&](int64_t r0, int64_t r1) {
    kern.rms_norm(dt, x2.data_ptr(), x2.stride(0), r2.defined() ? r2.data_ptr() : nullptr,
                  r2.defined() ? r2.stride(0) : 0, w.data_ptr<float>(), float(eps), d,
                  out.data_ptr(), summed.defined() ? summed.data_ptr() : nullptr, r0, r1);
  });
  out = like_x(out, x, x.sizes());
  if (summed.defined()) summed = like_x(summed, x, x.sizes());
  return {out, summed};
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return std::get<0>(add_rms_norm(x, std::nullopt, weight, eps));
}

std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm(const at::Tensor& x,
                                                      const at::Tensor& residual,
                                                      const at::Tensor& weight, double eps) {
  return add_rms_norm(x, residual, weight, eps);
}

at::Tensor silu_and_mul(const at::Tensor& x) {
  TORCH_CHECK(x.size(-1) % 2 == 0, "silu_and_mul: the last dim must be even");
  const at::Tensor x2 = rows2d(x, kernel_scalar_type(x));
  const int64_t d = x2.size(1) / 2;
  at::Tensor out = at::empty({x2.size(0), d}, x2.options());
  const Kernels& kern = kernels();
  const Dtype dt = kernel_dtype(x2);
  at::parallel_for(0, x2.size(0), row_grain(2 * d), [&](int64_t r0, int64_t r1) {
    kern.silu_and_mul(dt, x2.data_ptr(), x2.stride(0), d, out.data_ptr(), r0, r1);
  });
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = d;
  return like_x(out, x, shape);
}

// x [T, heads, head_size] (heads contiguous within a token) rotated into a new tensor.
at::Tensor rotate(const RotaryArgs& args, const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == args.head_size, "rotary_embedding: query and key "
              "must be [T, heads, ", args.head_size, "]");
  at::Tensor xt = as_type(x, kernel_scalar_type(x));
  if (xt.stride(2) != 1 || xt.stride(1) != args.head_size) xt = xt.contiguous();
  at::Tensor out = at::empty(xt.sizes(), xt.options());
  const Kernels& kern = kernels();
  const Dtype dt = kernel_dtype(xt);
  const int64_t heads = xt.size(1);
  at::parallel_for(0, xt.size(0), row_grain(heads * args.head_size), [&](int64_t r0, int64_t r1) {
    kern.rotary(dt, args, xt.data_ptr(), xt.stride(0), heads, out.data_ptr(), r0, r1);
  });
  return as_type(out, x.scalar_type());
}

std::tuple<at::Tensor, at::Tensor> rotary_embedding(const at::Tensor& positions,
                                                    const at::Tensor& query,
                                                    const at::Tensor& key,
                                                    const at::Tensor& cos_sin_cache,
                                                    bool is_neox) {
  const at::Tensor pos = dense(positions, at::kLong);
  const int64_t* p = pos.data_ptr<int64_t>();
  for (int64_t i = 0; i < pos.numel(); ++i)
    TORCH_CHECK(p[i] >= 0 && p[i] < cos_sin_cache.size(0), "rotary_embedding: position ", p[i],
                " is outside the cos/sin table (", cos_sin_cache.size(0), " positions)");
  at::Tensor table = cos_sin_cache, rows = pos;
  if (table.scalar_type() != at::kFloat || !table.is_contiguous()) {
    // Only the tokens' rows, in float32 (not the whole table every call).
    table = table.index_select(0, pos).to(at::kFloat).contiguous();
    rows = at::arange(pos.numel(), pos.options());
  }
  const int64_t rot_dim = table.size(1);
  TORCH_CHECK(rot_dim % 2 == 0 && rot_dim <= query.size(-1),
              "rotary_embedding: the cos/sin table's width must be even and fit a head");
  const RotaryArgs args{rows.data_ptr<int64_t>(), table.data_ptr<float>(), rot_dim, is_neox,
                        query.size(-1)};
  return {rotate(args, query), rotate(args, key)};
}

// Writes each token's key and value [T, KVH, D] (heads contiguous, any token stride) into
// its slot of kv_cache [2, blocks, block_size, KVH, D] (same dtype); slot -1: not cached.
void write_cache(const at::Tensor& key, const at::Tensor& value, const at::Tensor& kv_cache,
                 const at::Tensor& slot_mapping) {
  const int64_t kv_heads = kv_cache.size(3), d = kv_cache.size(4);
  for (const at::Tensor* t : {&key, &value})
    TORCH_CHECK(t->scalar_type() == kv_cache.scalar_type() && t->dim() == 3 &&
                    t->size(0) == slot_mapping.numel() && t->size(1) == kv_heads &&
                    t->size(2) == d && t->stride(2) == 1 && t->stride(1) == d,
                "decode_attention: key and value must be [T, ", kv_heads, ", ", d,
                "] in the cache's dtype, one slot per token");
  TORCH_CHECK(slot_mapping.scalar_type() == at::kLong && slot_mapping.dim() == 1,
              "decode_attention: slot_mapping must be int64 [T]");
  const int64_t slots = kv_cache.size(1) * kv_cache.size(2), row = kv_heads * d;
  const int64_t bytes = row * kv_cache.element_size();
  const int64_t* sp = slot_mapping.data_ptr<int64_t>();
  const int64_t sstride = slot_mapping.stride(0);
  char* keys = static_cast<char*>(kv_cache.data_ptr());
  char* values = keys + slots * bytes;
  const char* kp = static_cast<const char*>(key.data_ptr());
  const char* vp = static_cast<const char*>(value.data_ptr());
  const int64_t kstride = key.stride(0) * key.element_size();
  const int64_t vstride = value.stride(0) * value.element_size();
  for (int64_t t = 0; t < slot_mapping.numel(); ++t) {
    const int64_t slot = sp[t * sstride];
    if (slot < 0) continue;
    TORCH_CHECK(slot < slots, "decode_attention: slot ", slot, " is outside the cache (",
                slots, " slots)");
    std::memcpy(keys + slot * bytes, kp + t * kstride, bytes);
    std::memcpy(values + slot * bytes, vp + t * vstride, bytes);
  }
}

// One query token per sequence against the paged cache (see DecodeAttentionArgs):
// query [B, H, D] and kv_cache [2, blocks, block_size, KVH, D] in float32 or bfloat16.
// With key, value and slot_mapping, the step's keys and values are written first (a
// decode step's whole attention in one call: see write_cache). A sequence of length 0 (a
// padded step's) attends to nothing: its output is zeros.
at::Tensor decode_attention(const at::Tensor& query, const at::Tensor& kv_cache,
                            const at::Tensor& block_tables, const at::Tensor& seq_lens,
                            double scale, int64_t sliding_window, double soft_cap,
                            const std::optional<at::Tensor>& key,
                            const std::optional<at::Tensor>& value,
                            const std::optional<at::Tensor>& slot_mapping) {
  const auto st = query.scalar_type();
  TORCH_CHECK((st == at::kFloat || st == at::kBFloat16) && kv_cache.scalar_type() == st,
              "decode_attention: query and cache must both be float32 or bfloat16");
  TORCH_CHECK(query.dim() == 3 && kv_cache.dim() == 5 && kv_cache.size(0) == 2 &&
                  kv_cache.size(4) == query.size(2) && kv_cache.is_contiguous(),
              "decode_attention: query [B, H, D] and a contiguous cache [2, blocks, "
              "block_size, KVH, D]");
  const int64_t batch = query.size(0), heads = query.size(1), d = query.size(2);
  const int64_t kv_heads = kv_cache.size(3);
  TORCH_CHECK(d % 16 == 0 && d <= 256 && heads % kv_heads == 0,
              "decode_attention: head size a multiple of 16 up to 256, heads a multiple of "
              "KV heads");
  TORCH_CHECK(key.has_value() == value.has_value() && key.has_value() == slot_mapping.has_value(),
              "decode_attention: key, value and slot_mapping come together");
  if (key.has_value()) write_cache(*key, *value, kv_cache, *slot_mapping);
  const at::Tensor q = query.contiguous();
  const at::Tensor tables = dense(block_tables, at::kInt);
  TORCH_CHECK(tables.dim() == 2 && tables.size(0) == batch && seq_lens.numel() == batch &&
                  seq_lens.dim() == 1,
              "decode_attention: one block table row and length per sequence");
  std::vector<int64_t> lens(batch);
  if (seq_lens.scalar_type() == at::kInt) {  // the step metadata's own: no conversion
    const int32_t* lp = seq_lens.data_ptr<int32_t>();
    for (int64_t b = 0; b < batch; ++b) lens[b] = lp[b * seq_lens.stride(0)];
  } else {
    const at::Tensor l64 = seq_lens.to(at::kLong).contiguous();
    std::copy(l64.data_ptr<int64_t>(), l64.data_ptr<int64_t>() + batch, lens.begin());
  }
  int64_t longest = 1;
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(lens[b] >= 0 && lens[b] <= tables.size(1) * kv_cache.size(2),
                "decode_attention: sequence length ", lens[b], " outside its block table");
    longest = std::max(longest, lens[b]);
  }
  // Fewer (sequence, KV head) pairs than twice the threads (one sequence's decode) would
  // leave threads idle or uneven, each reading its pairs' keys and values from memory
  // alone: the pairs' positions are then split into parts (of at least 32 positions of the
  // longest sequence), merged after.
  const int64_t pairs = batch * kv_heads, threads = at::get_num_threads();
  const int64_t splits = pairs >= 2 * threads ? 1 : std::max<int64_t>(
      1, std::min((2 * threads + pairs - 1) / pairs, longest / 32));
  const int64_t group = heads / kv_heads;
  // Every part writes all of its sums (an empty part too), so the scratch is not cleared.
  static thread_local std::vector<float> partial;
  const size_t part_sums = splits > 1 ? pairs * splits * group * (d + 2) : 0;
  if (partial.size() < part_sums) partial.resize(part_sums);
  at::Tensor out = at::empty_like(q);
  const DecodeAttentionArgs args{q.data_ptr(), kv_cache.data_ptr(), tables.data_ptr<int32_t>(),
                                 lens.data(), out.data_ptr(), tables.size(1), kv_cache.size(1),
                                 kv_cache.size(2), kv_heads, heads, d, float(scale),
                                 float(soft_cap), sliding_window, splits, partial.data()};
  const Kernels& kern = kernels();
  const Dtype dt = kernel_dtype(q);
  const int64_t grain = std::max<int64_t>(1, 16384 * splits / (longest * d * group));
  const size_t part_scores = (longest + splits - 1) / splits * group;  // a part's weights
  at::parallel_for(0, pairs * splits, grain, [&](int64_t i0, int64_t i1) {
    static thread_local std::vector<float> scores;
    if (scores.size() < part_scores) scores.resize(part_scores);
    kern.decode_attention(dt, args, scores.data(), i0, i1);
  });
  // On this thread: a few thousand multiply-adds for one sequence, less than a fork costs.
  if (splits > 1) kern.decode_attention_merge(dt, args, 0, pairs);
  return out;
}

#include "decode_layer.h"  // uses the functions above

}  // namespace
}  // namespace pagoda_cpu

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace pagoda_cpu;
  m.def("has_isa", &has_isa, "whether this build has kernels for an instruction set");
  m.def("set_isa", &set_isa, "use the kernels of an instruction set from now on");
  m.def("isa", &isa, "the instruction set in use ('' before set_isa)");
  m.def("parallel_tasks", &parallel_tasks, "tasks at::parallel_for makes of [0, n)");
  m.def("woq_gemv", &woq_gemv,
        "x [M, K] times a packed 4/8-bit weight^T (+ bias), float32; act_block 32: x "
        "rounded to int8 blocks of 32 inputs first (0: as it is)",
        py::arg("x"), py::arg("codes"), py::arg("scales"), py::arg("offsets"),
        py::arg("bits"), py::arg("bias") = py::none(), py::arg("act_block") = 0);
  m.def("woq_gemm", &woq_gemm, "woq_gemv's product by the many-row kernel (a batch of rows)",
        py::arg("x"), py::arg("codes"), py::arg("scales"), py::arg("offsets"),
        py::arg("bits"), py::arg("bias") = py::none(), py::arg("act_block") = 0);
  m.def("rms_norm", &rms_norm, "core's rms_norm");
  m.def("fused_add_rms_norm", &fused_add_rms_norm, "core's fused_add_rms_norm");
  m.def("silu_and_mul", &silu_and_mul, "core's silu_and_mul");
  m.def("rotary_embedding", &rotary_embedding, "core's rotary_embedding");
  m.def("decode_attention", &decode_attention,
        "one query token per sequence against its paged KV cache (grouped-query), after "
        "writing the step's keys and values where given",
        py::arg("query"), py::arg("kv_cache"), py::arg("block_tables"), py::arg("seq_lens"),
        py::arg("scale"), py::arg("sliding_window"), py::arg("soft_cap"),
        py::arg("key") = py::none(), py::arg("value") = py::none(),
        py::arg("slot_mapping") = py::none());
  m.def("woq_dequantize", &woq_dequantize, "a packed 4/8-bit weight as float32 [N, K]");
  bind_decode_layer(m);
}
