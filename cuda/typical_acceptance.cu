// Typical acceptance over batched trees: one block of 1024 threads per tree.
// Every thread walks the nodes in index order (topological) with the same
// loads and decisions; a slot's threshold is computed once, by the block
// (block_lane_sum of -P log P), and kept in shared memory; the bonus token is
// block_draw's.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "block_math.cuh"
#include "launch_checks.hpp"
#include "specdec/core/bitexact.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/cuda/typical_acceptance.hpp"

namespace specdec::cuda {
namespace {

using detail::kBlock;

constexpr int kMaxNodes = 256;

__global__ void __launch_bounds__(kBlock) typical_acceptance_kernel(
    const std::int32_t* __restrict__ parents, const TokenId* __restrict__ tokens,
    const float* __restrict__ target_probs, const std::int32_t* __restrict__ tree_nodes,
    std::int32_t* __restrict__ accepted_nodes, std::int32_t* __restrict__ num_accepted,
    TokenId* __restrict__ emitted, std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab,
    float posterior_threshold, float posterior_alpha, std::uint64_t seed, std::uint64_t offset,
    const PhiloxUniforms* __restrict__ tree_streams) {
  __shared__ detail::BlockScratch sh;
  __shared__ double slot_threshold[kMaxNodes + 1], score[kMaxNodes];
  __shared__ std::int32_t depth[kMaxNodes];
  __shared__ std::uint8_t ok[kMaxNodes];
  const std::int64_t b = blockIdx.x;
  const int t = threadIdx.x;
  const std::int32_t n = tree_nodes == nullptr ? nodes : tree_nodes[b];
  const std::int32_t* par = parents + b * nodes;
  const TokenId* tok = tokens + b * nodes;
  const float* target = target_probs + b * (static_cast<std::int64_t>(nodes) + 1) * vocab;
  std::int32_t* path = accepted_nodes + b * max_depth;

  bool valid = n >= 0 && n <= nodes && n <= kMaxNodes;
  for (std::int32_t j = 0; valid && j < n; ++j)
    valid = par[j] >= -1 && par[j] < j && tok[j] >= 0 && tok[j] < vocab;
  std::int32_t best = -1;
  if (valid) {
    for (std::int32_t s = t; s <= n; s += kBlock) slot_threshold[s] = -1.0;
    __syncthreads();
    for (std::int32_t c = 0; c < n; ++c) {
      const std::int32_t parent = par[c];
      // Every thread reads the same shared values (written before the last barrier).
      const bool parent_ok = parent < 0 || ok[parent] != 0;
      const float* p = target + (parent + 1) * vocab;
      const double p_x = p[tok[c]];
      bool accept = parent_ok && p_x > posterior_threshold;
      if (parent_ok && !accept) {
        if (slot_threshold[parent + 1] < 0.0) {
          const double entropy = detail::block_lane_sum(
              [p](std::int64_t i) {
                const double v = p[i];
                return v > 0.0 ? -bitexact::mul_rn(v, bitexact::log_positive(v)) : 0.0;
              },
              vocab, sh);
          const double threshold = fmin(static_cast<double>(posterior_threshold),
                                        bitexact::mul_rn(static_cast<double>(posterior_alpha),
                                                          bitexact::exp_nonpositive_double(-entropy)));
          if (t == 0) slot_threshold[parent + 1] = threshold;
          __syncthreads();
        }
        accept = p_x > slot_threshold[parent + 1];
      }
      if (t == 0) {
        ok[c] = accept ? 1 : 0;
        depth[c] = parent < 0 ? 1 : depth[parent] + 1;
        score[c] = accept ? (parent < 0 ? 0.0 : score[parent]) + bitexact::log_positive(p_x) : 0.0;
      }
      __syncthreads();
      if (accept &&
          (best < 0 || depth[c] > depth[best] || (depth[c] == depth[best] && score[c] > score[best])))
        best = c;
    }
    if (best >= 0 && depth[best] > max_depth) valid = false;
  }
  TokenId y = kNoToken;
  if (valid) {
    const float* p = target + (best + 1) * vocab;
    const double u = detail::tree_uniforms(tree_streams, seed, b, offset)[0];
    y = detail::block_draw([p](std::int64_t i) { return static_cast<double>(p[i]); }, vocab, u, sh);
  }
  if (t == 0) {
    std::int32_t k = 0;
    if (valid && best >= 0) {
      k = depth[best];
      for (std::int32_t c = best, d = k - 1; c >= 0; c = par[c], --d) path[d] = c;
    }
    for (std::int32_t j = k; j < max_depth; ++j) path[j] = -1;
    num_accepted[b] = valid ? k : -1;
    emitted[b] = valid ? y : kNoToken;
  }
}

}  // namespace

Status typical_acceptance(const std::int32_t* parents, const TokenId* tokens, const float* target_probs,
                          const std::int32_t* tree_nodes, std::int32_t* accepted_nodes,
                          std::int32_t* num_accepted, TokenId* emitted, std::int32_t batch,
                          std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab,
                          float posterior_threshold, float posterior_alpha, std::uint64_t seed,
                          std::uint64_t offset, void* stream,
    const PhiloxUniforms* tree_streams) {
  if (batch < 0 || nodes < 0 || nodes == std::numeric_limits<std::int32_t>::max() || max_depth < 0 ||
      max_depth > nodes || vocab <= 0 || vocab > detail::kMaxBlockVocab)
    return Status::kInvalidArgument;
  if (!(posterior_threshold > 0.0f && posterior_threshold <= 1.0f) ||
      !(posterior_alpha > 0.0f && std::isfinite(posterior_alpha)))
    return Status::kInvalidArgument;
  const std::int64_t rows = static_cast<std::int64_t>(batch) * (static_cast<std::int64_t>(nodes) + 1);
  if (rows > 0 && vocab > std::numeric_limits<std::int64_t>::max() / rows) return Status::kInvalidArgument;
  if (batch == 0) return Status::kOk;
  if (target_probs == nullptr || num_accepted == nullptr || emitted == nullptr ||
      (nodes > 0 && (parents == nullptr || tokens == nullptr)) ||
      (max_depth > 0 && accepted_nodes == nullptr))
    return Status::kInvalidArgument;
  typical_acceptance_kernel<<<static_cast<unsigned>(batch), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      parents, tokens, target_probs, tree_nodes, accepted_nodes, num_accepted, emitted, nodes, max_depth,
      vocab, posterior_threshold, posterior_alpha, seed, offset, tree_streams);
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kCudaError;
}

}  // namespace specdec::cuda
