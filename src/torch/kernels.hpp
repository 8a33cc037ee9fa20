// Row kernels shared by the libtorch backend's models (LlamaModel and the
// draft heads): the same formulas in an autograd form (training) and as plain
// loops over contiguous float rows (inference, where chains of small ATen
// calls cost more than the arithmetic; docs/RESULTS.md, model forward cost).
// Internal to src/torch.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <utility>

#include "specdec/cpu/llama_model.hpp"
#include "specdec/io/llama_config.hpp"

namespace specdec::torch_backend::kernels {

// cos and sin of every position, [max_position, head_dim]: cpu::rope_tables'
// values (the inference models'), as tensors.
inline std::pair<at::Tensor, at::Tensor> rope_tables(const io::LlamaConfig& c) {
  auto t = cpu::rope_tables(c);
  return {at::from_blob(t.cos.data(), {c.max_position_embeddings, c.head_dim}).clone(),
          at::from_blob(t.sin.data(), {c.max_position_embeddings, c.head_dim}).clone()};
}

// x @ w^T in autograd form, computed in `compute` precision: f32, or bf16
// operands with f32 accumulation (oneDNN's bf16 matmul, ~4x the f32 GEMM on
// AVX512_BF16 CPUs), the usual mixed-precision training recipe. The result,
// and so every norm, softmax and loss after it, is f32; the weights a trainer
// updates stay f32.
inline at::Tensor linear(const at::Tensor& x, const at::Tensor& w, at::ScalarType compute = at::kFloat) {
  if (compute == at::kFloat) return at::matmul(x, w.t());
  return at::matmul(x.to(compute), w.to(compute).t()).to(at::kFloat);
}

inline at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * weight;
}

// rotate_half of the Hugging Face Llama: (x1, x2) -> (-x2, x1) over the two
// halves of the head dimension (not interleaved pairs).
inline at::Tensor rotate_half(const at::Tensor& x) {
  const auto half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// Rotary embedding in autograd form: x * cos + rotate_half(x) * sin for x
// [..., n, heads, head_dim] at positions [n] (int64).
inline at::Tensor rope(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& cos_table,
                       const at::Tensor& sin_table) {
  const auto cos = cos_table.index_select(0, positions).unsqueeze(-2);  // [n, 1, hd]
  const auto sin = sin_table.index_select(0, positions).unsqueeze(-2);
  return x * cos + rotate_half(x) * sin;
}

// y = x * rsqrt(mean(x^2) + eps) * w, row by row; x [n, d].
inline at::Tensor rms_norm_rows(const at::Tensor& x, const at::Tensor& w, double eps) {
  const auto n = x.size(0), d = x.size(1);
  auto y = at::empty({n, d});
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    const float* row = xp + i * d;
    float ss = 0.0f;
    for (std::int64_t j = 0; j < d; ++j) ss += row[j] * row[j];
    const float r = 1.0f / std::sqrt(ss / static_cast<float>(d) + static_cast<float>(eps));
    for (std::int64_t j = 0; j < d; ++j) yp[i * d + j] = row[j] * r * wp[j];
  }
  return y;
}

// silu(g) * u over gu = [n, 2 f] (gate | up) -> [n, f]. ATen's vectorised
// silu: a scalar std::exp loop cost ~0.1 ms per layer at 16 tokens.
inline at::Tensor swiglu_rows(const at::Tensor& gu, std::int64_t f) {
  return at::silu(gu.narrow(1, 0, f)).mul_(gu.narrow(1, f, f));
}

}  // namespace specdec::torch_backend::kernels
