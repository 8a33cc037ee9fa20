// The kernels of cuda::LlamaModel's forward (llama_kernels.cu), behind host
// launchers that enqueue on a stream and return. Internal to specdec::cuda;
// needs no CUDA headers (a cudaStream_t is passed as void*). Every launcher
// returns false when the launch failed (cudaGetLastError), true otherwise.
#pragma once

#include <cstdint>

#include "specdec/cuda/token_plan.hpp"

namespace specdec::cuda::detail {

// The shape the attention kernels need; head_dim even and <= kMaxHeadDim.
// (Each cache's rows per layer and kv head come with its tokens' plans.)
struct AttentionShape {
  std::int32_t heads = 0, kv_heads = 0, head_dim = 0;
  std::int32_t layers = 0;
};
inline constexpr std::int32_t kMaxHeadDim = 256;

// Weights are f32, or bf16 (`bf16`) as raw 16-bit words.

// Each launcher below returns false when its launch failed; then this names
// the error (the calling thread's last failed launch).
const char* last_launch_error();

// w[i] ~ N(0, sd^2) from Philox stream `stream` of `seed` (Box-Muller over
// uniforms 2i and 2i + 1).
bool fill_normal(void* w, bool bf16, std::int64_t n, double sd, std::uint64_t seed, std::uint64_t stream,
                 void* cuda_stream);
// w[i] = value.
bool fill_value(void* w, bool bf16, std::int64_t n, float value, void* cuda_stream);

// x[t] = table[tokens[t]] as f32, rows of `hidden`.
bool embed_rows(const void* table, bool bf16, const std::int32_t* tokens, std::int64_t rows,
                std::int64_t hidden, float* x, void* stream);

// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight.
bool rms_norm_rows(const float* x, const float* weight, float* y, std::int64_t rows, std::int64_t hidden,
                   float eps, void* stream);

// y[m, n] (+)= sum_k x[m, k] w[n, k]: x [rows, in] f32, w [out, in], y
// [rows, out] f32; added to y with `accumulate`. Row m's sums do not depend
// on `rows`.
bool linear_rows(const float* x, const void* w, bool bf16, float* y, std::int64_t rows, std::int64_t out,
                 std::int64_t in, bool accumulate, void* stream);

// linear_rows of the RMSNorm of x (as rms_norm_rows with weight `norm`, f32
// [in]), one launch: y = norm(x) w^T.
bool norm_linear_rows(const float* x, const float* norm, float eps, const void* w, bool bf16, float* y,
                      std::int64_t rows, std::int64_t out, std::int64_t in, void* stream);

// The SwiGLU MLP's first half in one launch: with w [2 inner, in] (the
// gate's rows, then the up's) and h = norm(x) as above,
// y[m, i] = silu(h[m] . w[i]) * (h[m] . w[inner + i]), y [rows, inner].
bool norm_swiglu_rows(const float* x, const float* norm, float eps, const void* w, bool bf16, float* y,
                      std::int64_t rows, std::int64_t inner, std::int64_t in, void* stream);

// RoPE on each row's q heads (in place in qkv) and k heads, and the keys and
// values stored at plan[t].write_row of layer `layer` of the row's cache
// slot. qkv rows: [q heads | k heads | v heads] x head_dim. cos/sin:
// [max_position, head_dim]. k_slots/v_slots: device arrays of each slot's
// cache base, [layers, kv_heads, plan[t].capacity, head_dim] f32.
bool rope_and_store(float* qkv, const TokenPlan* plan, std::int64_t rows, const float* cos, const float* sin,
                    float* const* k_slots, float* const* v_slots, std::int32_t layer,
                    const AttentionShape& shape, void* stream);

// out[t, h] = softmax over the keys row t may see of q.k / sqrt(head_dim),
// times the values (TokenPlan: the prefix, then the window's visible keys).
bool attention_rows(const float* qkv, const TokenPlan* plan, const std::uint64_t* mask_words,
                    std::int64_t rows, const float* const* k_slots, const float* const* v_slots,
                    std::int32_t layer, const AttentionShape& shape, float* out, void* stream);

// One sequence's accept: the n moves (device; CacheMove, made in order) in
// every layer and kv head of the cache at k / v, `capacity` rows each; a
// move's sink row goes to `sink_keys` ([layers, kv_heads, sink, head_dim]).
bool compact_cache(float* k, float* v, std::int64_t capacity, const CacheMove* moves, std::int32_t n,
                   float* sink_keys, std::int32_t sink, const AttentionShape& shape, void* stream);

// A sink + window cache with positions within the cache (MagicDec): rows
// [0, count) of every layer and kv head become the sink's keys rotated from
// their own positions by `shift` more (the tokens evicted): RoPE composes, so
// row s scores as a key at position s + shift would.
bool shift_sink(float* k, std::int64_t capacity, const float* sink_keys, std::int32_t sink,
                std::int32_t count, std::int64_t shift, const float* cos, const float* sin,
                const AttentionShape& shape, void* stream);

}  // namespace specdec::cuda::detail
