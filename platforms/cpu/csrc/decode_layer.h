// The CPU's fused decode step of a decoder layer (pagoda_cpu.decode_layer), included by
// ops.cpp inside its anonymous namespace, after the ops it chains: the same functions the
// layer's ops call one by one, so the results are theirs bit for bit.
#pragma once

// A packed linear of a fused layer: the kernel woq_linear would pick for a row count.
struct PackedLinear {
  at::Tensor codes, scales, offsets;
  int64_t bits;
  std::optional<at::Tensor> bias;
  int64_t gemv_max_rows, act_block;

  at::Tensor operator()(const at::Tensor& x) const {
    return woq_product(x, codes, scales, offsets, bits, bias, x.size(0) > gemv_max_rows,
                       act_block);
  }
};

// A decoder layer's decode step as two calls around its attention (core's
// pagoda.models.decode_fusion; pagoda_cpu.decode_layer builds it): the same kernels, in the
// same order and with the same arguments, as the layer's ops one by one.
class DecodeLayer {
 public:
  DecodeLayer(PackedLinear qkv, PackedLinear o, PackedLinear gate_up, PackedLinear down,
              at::Tensor input_norm, at::Tensor post_norm, double eps, at::Tensor cos_sin_cache,
              bool is_neox, int64_t heads, int64_t kv_heads, int64_t head_size,
              int64_t max_rows)
      : qkv_(std::move(qkv)), o_(std::move(o)), gate_up_(std::move(gate_up)),
        down_(std::move(down)), input_norm_(std::move(input_norm)),
        post_norm_(std::move(post_norm)), eps_(eps), cos_sin_(std::move(cos_sin_cache)),
        is_neox_(is_neox), heads_(heads), kv_heads_(kv_heads), head_size_(head_size),
        max_rows(max_rows) {}

  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> pre_attention(
      const at::Tensor& positions, const at::Tensor& hidden,
      const std::optional<at::Tensor>& residual) const {
    at::Tensor x, res;
    if (residual.has_value()) {
      std::tie(x, res) = add_rms_norm(hidden, residual, input_norm_, eps_);
    } else {
      x = rms_norm(hidden, input_norm_, eps_);
      res = hidden;
    }
    const at::Tensor qkv = qkv_(x);
    const int64_t t = qkv.size(0), q = heads_ * head_size_, kv = kv_heads_ * head_size_;
    auto [query, key] = rotary_embedding(positions, qkv.narrow(1, 0, q).view({t, heads_, head_size_}),
                                         qkv.narrow(1, q, kv).view({t, kv_heads_, head_size_}),
                                         cos_sin_, is_neox_);
    return {query, key, qkv.narrow(1, q + kv, kv).view({t, kv_heads_, head_size_}), res};
  }

  std::tuple<at::Tensor, at::Tensor> post_attention(const at::Tensor& attn_out,
                                                    const at::Tensor& residual) const {
    auto [x, res] = add_rms_norm(o_(attn_out), residual, post_norm_, eps_);
    return {down_(silu_and_mul(gate_up_(x))), res};
  }

 private:
  PackedLinear qkv_, o_, gate_up_, down_;
  at::Tensor input_norm_, post_norm_;
  double eps_;
  at::Tensor cos_sin_;
  bool is_neox_;
  int64_t heads_, kv_heads_, head_size_;

 public:
  const int64_t max_rows;
};

void bind_decode_layer(py::module_& m) {
  py::class_<PackedLinear>(m, "PackedLinear", "a packed 4/8-bit linear of a DecodeLayer")
      .def(py::init([](at::Tensor codes, at::Tensor scales, at::Tensor offsets, int64_t bits,
                       std::optional<at::Tensor> bias, int64_t gemv_max_rows,
                       int64_t act_block) {
             return PackedLinear{codes, scales, offsets, bits, bias, gemv_max_rows, act_block};
           }),
           py::arg("codes"), py::arg("scales"), py::arg("offsets"), py::arg("bits"),
           py::arg("bias"), py::arg("gemv_max_rows"), py::arg("act_block"));
  py::class_<DecodeLayer>(m, "DecodeLayer",
                          "a decoder layer's decode step in two calls around its attention")
      .def(py::init<PackedLinear, PackedLinear, PackedLinear, PackedLinear, at::Tensor,
                    at::Tensor, double, at::Tensor, bool, int64_t, int64_t, int64_t, int64_t>(),
           py::arg("qkv"), py::arg("o"), py::arg("gate_up"), py::arg("down"),
           py::arg("input_norm"), py::arg("post_norm"), py::arg("eps"),
           py::arg("cos_sin_cache"), py::arg("is_neox"), py::arg("heads"),
           py::arg("kv_heads"), py::arg("head_size"), py::arg("max_rows"))
      .def("pre_attention", &DecodeLayer::pre_attention, py::arg("positions"),
           py::arg("hidden_states"), py::arg("residual"))
      .def("post_attention", &DecodeLayer::post_attention, py::arg("attn_out"),
           py::arg("residual"))
      .def_readonly("max_rows", &DecodeLayer::max_rows);
}
