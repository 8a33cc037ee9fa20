// Row-wise logit warping: one block of 1024 threads per row, the host Warper's
// steps in its order (core/warp.hpp), each a pass over the row:
//   1. the largest logit, and whether any is NaN or +inf (for greedy and top-k
//      rows; the others find both in step 4's pass);
//   2. greedy: one-hot at the argmax; else
//   3. top-k: the k-th largest logit (radix selection over ordered keys);
//   4. softmax, chunk by chunk (bitexact.hpp): exponents stored and summed,
//      then scaled;
//   5. top-p: the nucleus' last probability (radix selection weighted by
//      fixed-point masses), the rest zeroed and the row renormalised.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "block_math.cuh"
#include "specdec/core/bitexact.hpp"
#include "specdec/cuda/warp.hpp"

namespace specdec::cuda {
namespace {

using detail::BlockScratch;
using detail::kBlock;
// The widest row warp_rows takes (2^24) in chunks of the softmax.
constexpr std::int64_t kMaxChunks = (std::int64_t{1} << 24) / bitexact::kSumChunk;

__device__ bool valid_params(const RowSampling& p) {
  return isfinite(p.temperature) && p.temperature >= 0.0f && p.top_k >= 0 && p.top_p > 0.0f &&
         p.top_p <= 1.0f;
}

__global__ void __launch_bounds__(kBlock)
    warp_rows_kernel(const float* __restrict__ logits, float* __restrict__ probs,
                     const RowSampling* __restrict__ params, std::int32_t* __restrict__ status,
                     std::int64_t vocab, const std::int32_t* __restrict__ out_rows) {
  __shared__ BlockScratch sh;
  const std::int64_t row = blockIdx.x;
  const float* x = logits + row * vocab;
  float* out = probs + (out_rows == nullptr ? row : std::int64_t{out_rows[row]}) * vocab;
  const int t = threadIdx.x;
  const RowSampling sp = params[row];
  constexpr float kInf = std::numeric_limits<float>::infinity();

  const auto fail = [&](WarpRowStatus s) {
    for (std::int64_t i = t; i < vocab; i += kBlock) out[i] = 0.0f;
    if (t == 0) status[row] = static_cast<std::int32_t>(s);
  };
  if (!valid_params(sp)) return fail(WarpRowStatus::kBadParams);

  // 1. max, and NaN / +inf (both fail v < inf), before the greedy and top-k
  //    steps; temperature-only rows find both in the softmax's pass (4).
  const bool top_k = sp.top_k > 0 && sp.top_k < vocab;
  const bool scan_first = sp.temperature == 0.0f || top_k;
  if (scan_first) {
    float m = -kInf;
    int bad = 0;
    for (std::int64_t i = t; i < vocab; i += kBlock) {
      const float v = x[i];
      bad |= !(v < kInf);
      m = v > m ? v : m;
    }
    if (__syncthreads_or(bad)) return fail(WarpRowStatus::kNonFiniteLogit);
    m = detail::block_max(m, sh);
    if (m == -kInf) return fail(WarpRowStatus::kAllMasked);
  }

  // 2. greedy.
  if (sp.temperature == 0.0f) {
    const std::int64_t best = detail::block_argmax(x, vocab, sh);
    for (std::int64_t i = t; i < vocab; i += kBlock) out[i] = i == best ? 1.0f : 0.0f;
    if (t == 0) status[row] = 0;
    return;
  }

  // 3. top-k: the k-th largest logit is the admission threshold.
  float threshold = -kInf;
  if (top_k) {
    std::uint32_t key = 0;
    std::uint64_t unused = 0;
    detail::block_select_from_top([x](std::int64_t i) { return bitexact::ordered_key(x[i]); },
                                  [](std::int64_t) { return std::uint64_t{1}; }, vocab,
                                  static_cast<std::uint64_t>(sp.top_k), sh, &key, &unused);
    // Back from the ordered key to the float (the inverse of ordered_key).
    const std::uint32_t bits = (key & 0x80000000u) != 0 ? key ^ 0x80000000u : ~key;
    threshold = __uint_as_float(bits);
  }

  // 4. softmax over the survivors at temperature T, chunk by chunk
  //    (bitexact.hpp): each chunk's exponents stored as they are summed, then
  //    scaled in place by the thread that stored them (lane t owns tokens
  //    t + 1024 j).
  __shared__ float factors[kMaxChunks];  // each chunk's largest logit, then its factor
  __shared__ double sums[kMaxChunks];
  const float inv_t = 1.0f / sp.temperature;
  const std::int64_t chunks = (vocab + bitexact::kSumChunk - 1) / bitexact::kSumChunk;
  for (std::int64_t c = 0; c < chunks; ++c) {
    float v[8], e[8];
    int bad = 0;
    for (int j = 0; j < 8; ++j) {
      const std::int64_t i = c * bitexact::kSumChunk + j * kBlock + t;
      v[j] = i < vocab ? x[i] : -kInf;
      bad |= !(v[j] < kInf);
    }
    if (!scan_first && __syncthreads_or(bad)) return fail(WarpRowStatus::kNonFiniteLogit);
    const detail::SoftmaxChunk chunk = detail::block_softmax_chunk(v, threshold, inv_t, e, sh);
    for (int j = 0; j < 8; ++j) {
      const std::int64_t i = c * bitexact::kSumChunk + j * kBlock + t;
      if (i < vocab) out[i] = e[j];
    }
    if (t == 0) factors[c] = chunk.max, sums[c] = chunk.sum;
  }
  __syncthreads();
  float m = -kInf;  // the row's largest logit
  for (std::int64_t c = 0; c < chunks; ++c) m = factors[c] > m ? factors[c] : m;
  if (m == -kInf) return fail(WarpRowStatus::kAllMasked);
  double normaliser = 0.0;  // every thread adds the chunks in order
  for (std::int64_t c = 0; c < chunks; ++c)
    normaliser = bitexact::softmax_normaliser_add(normaliser, sums[c], bitexact::softmax_chunk_scale(factors[c], m, inv_t));
  __syncthreads();
  for (std::int64_t c = t; c < chunks; c += kBlock)
    factors[c] = bitexact::softmax_chunk_factor(bitexact::softmax_chunk_scale(factors[c], m, inv_t), normaliser);
  __syncthreads();
  for (std::int64_t i = t; i < vocab; i += kBlock)
    out[i] = bitexact::mul_rn(out[i], factors[i / bitexact::kSumChunk]);

  // 5. top-p over the normalised row.
  if (sp.top_p < 1.0f) {
    __syncthreads();  // the row written above is read by other threads
    const std::uint64_t target = bitexact::fixed_mass(sp.top_p);
    std::uint32_t last_bits = 0;
    std::uint64_t kept = 0;
    const bool reached = target != 0 && detail::block_select_from_top(
                                            [out](std::int64_t i) { return __float_as_uint(out[i]); },
                                            [out](std::int64_t i) { return bitexact::fixed_mass(out[i]); },
                                            vocab, target, sh, &last_bits, &kept);
    if (reached) {
      int dropped = 0;
      for (std::int64_t i = t; i < vocab; i += kBlock) {
        const std::uint32_t b = __float_as_uint(out[i]);
        dropped |= b != 0 && b < last_bits;
      }
      if (__syncthreads_or(dropped)) {
        const float inv_kept = static_cast<float>(1.0 / (static_cast<double>(kept) * 0x1p-60));
        for (std::int64_t i = t; i < vocab; i += kBlock) {
          const float p = out[i];
          out[i] = __float_as_uint(p) < last_bits ? 0.0f : bitexact::mul_rn(p, inv_kept);
        }
      }
    }
  }
  if (t == 0) status[row] = 0;
}

}  // namespace

Status warp_rows(const float* logits, float* probs, const RowSampling* params, std::int32_t* status,
                 std::int32_t rows, std::int64_t vocab, void* stream, const std::int32_t* out_rows) {
  if (rows < 0 || vocab <= 0 || vocab > (std::int64_t{1} << 24)) return Status::kInvalidArgument;
  if (rows == 0) return Status::kOk;
  if (logits == nullptr || probs == nullptr || params == nullptr || status == nullptr)
    return Status::kInvalidArgument;
  if (vocab > std::numeric_limits<std::int64_t>::max() / rows) return Status::kInvalidArgument;
  warp_rows_kernel<<<static_cast<unsigned>(rows), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      logits, probs, params, status, vocab, out_rows);
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kCudaError;
}

}  // namespace specdec::cuda
