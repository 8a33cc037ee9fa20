// Recursive rejection sampling over batched trees: one block of 1024 threads
// per tree, and its launcher. Every thread runs the walk's scalar steps (the
// same loads and arithmetic, so the same decisions); the block shares the
// vocabulary-wide work: row sums (block_lane_sum, the host's lane_sum shape)
// and draws (block_draw, the host's fixed-point inverse CDF).
//
// At a sampled slot the host rule keeps two double rows, the residual r and
// the normalised draft law q, and updates both after each rejected child.
// Here nothing vocabulary-wide is stored: r_j(i) and q_j(i) after j
// rejections are recomputed from p(i), q(i) and the slot's scalars (each
// rejection's token, mass and remaining draft mass) with the host's
// operations in the host's order, so they are the host's values to the bit.
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "block_math.cuh"
#include "launch_checks.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/cuda/recursive_rejection_sampling.hpp"

namespace specdec::cuda {
namespace {

using detail::kBlock;

constexpr int kMaxChildren = 64;

// A sampled slot's scalars after `rejected` rejections.
struct SampledSlot {
  const float* p;
  const float* q;
  double q_total;
  bool without_replacement;
  int rejected;
  const TokenId* xs;     // [kMaxChildren] the rejected children's tokens
  const double* masses;  // [kMaxChildren] the residual mass at each rejection
  const double* rests;   // [kMaxChildren] 1 - q(x) at each rejection (without replacement)
};

// r_j(i) and q_j(i) for j = s.rejected: the host's residual_[i] and q_[i].
__device__ __forceinline__ void slot_state(const SampledSlot& s, std::int64_t i, double* r, double* q) {
  double rv = static_cast<double>(s.p[i]);
  double qv = static_cast<double>(s.q[i]);
  if (s.q_total > 0.0) qv /= s.q_total;
  for (int j = 0; j < s.rejected; ++j) {
    const double d = rv - qv;
    if (s.masses[j] > 0.0) rv = (0.0 < d ? d : 0.0) / s.masses[j];
    if (s.without_replacement) qv = i == s.xs[j] ? 0.0 : (s.rests[j] > 0.0 ? qv / s.rests[j] : qv);
  }
  *r = rv;
  *q = qv;
}

__global__ void __launch_bounds__(kBlock) recursive_rejection_sampling_kernel(
    const std::int32_t* __restrict__ parents, const TokenId* __restrict__ tokens,
    const std::uint8_t* __restrict__ slot_draws, const float* __restrict__ draft_probs,
    const float* __restrict__ target_probs, const std::int32_t* __restrict__ tree_nodes,
    std::int32_t* __restrict__ accepted_nodes, std::int32_t* __restrict__ num_accepted,
    TokenId* __restrict__ emitted, std::int32_t* __restrict__ draws_used, std::int32_t nodes,
    std::int32_t max_depth, std::int64_t vocab, std::uint64_t seed, std::uint64_t offset,
    const PhiloxUniforms* __restrict__ tree_streams) {
  __shared__ detail::BlockScratch sh;
  __shared__ TokenId xs[kMaxChildren];
  __shared__ double masses[kMaxChildren], rests[kMaxChildren];
  const std::int64_t b = blockIdx.x;
  const int t = threadIdx.x;
  const std::int32_t n = tree_nodes == nullptr ? nodes : tree_nodes[b];
  const std::int32_t* par = parents + b * nodes;
  const TokenId* tok = tokens + b * nodes;
  const std::uint8_t* draws = slot_draws + b * (nodes + 1);
  const std::int64_t rows = static_cast<std::int64_t>(nodes) + 1;
  const float* target = target_probs + b * rows * vocab;
  const float* draft = draft_probs == nullptr ? nullptr : draft_probs + b * rows * vocab;
  std::int32_t* path = accepted_nodes + b * max_depth;
  const PhiloxUniforms uniforms = detail::tree_uniforms(tree_streams, seed, b, offset);

  bool ok = n >= 0 && n <= nodes;
  for (std::int32_t j = 0; ok && j < n; ++j)
    ok = par[j] >= -1 && par[j] < j && tok[j] >= 0 && tok[j] < vocab && draws[par[j] + 1] <= 2 &&
         (draws[par[j] + 1] == 0 || draft != nullptr);
  std::uint64_t used = 0;  // uniforms drawn
  std::int32_t depth = 0, slot = -1;
  TokenId y = kNoToken;
  while (ok) {
    const float* p = target + (slot + 1) * vocab;
    // The slot's children, in sibling (index) order.
    std::int32_t children = 0;
    for (std::int32_t c = slot + 1; c < n; ++c) children += par[c] == slot;
    if (children == 0) {  // a leaf: the bonus token
      y = detail::block_draw([p](std::int64_t i) { return static_cast<double>(p[i]); }, vocab,
                             uniforms[used++], sh);
      break;
    }
    if (children > kMaxChildren) {
      ok = false;
      break;
    }
    std::int32_t next = -1;
    const std::uint8_t mode = draws[slot + 1];
    if (mode == 0) {
      // Deterministic children: accept x w.p. P(x) / mass, P renormalised
      // over the tokens not yet rejected; a repeated token has no mass left.
      double mass =
          detail::block_lane_sum([p](std::int64_t i) { return static_cast<double>(p[i]); }, vocab, sh);
      for (std::int32_t c = slot + 1; c < n && next < 0; ++c) {
        if (par[c] != slot) continue;
        const TokenId x = tok[c];
        bool gone = false;
        for (std::int32_t e = slot + 1; e < c; ++e) gone |= par[e] == slot && tok[e] == x;
        const double p_x = gone ? 0.0 : static_cast<double>(p[x]);
        if (uniforms[used++] * mass < p_x) {
          next = c;
        } else if (!gone) {
          mass -= p_x;
        }
      }
      if (next < 0) {  // every child rejected: P without them, or P if nothing is left
        const double u = uniforms[used++];
        y = detail::block_draw(
            [=](std::int64_t i) {
              for (std::int32_t c = slot + 1; c < n; ++c)
                if (par[c] == slot && tok[c] == i) return 0.0;
              return static_cast<double>(p[i]);
            },
            vocab, u, sh);
        if (y == kNoToken)
          y = detail::block_draw([p](std::int64_t i) { return static_cast<double>(p[i]); }, vocab, u, sh);
        break;
      }
    } else {
      // Sampled children (SpecInfer MSS; without replacement, Sequoia).
      const float* q = draft + (slot + 1) * vocab;
      SampledSlot s{p, q, 0.0, mode == 2, 0, xs, masses, rests};
      if (s.without_replacement) {  // repeated tokens cannot have been drawn without replacement
        for (std::int32_t c = slot + 1; ok && c < n; ++c)
          for (std::int32_t e = slot + 1; ok && e < c; ++e)
            ok = !(par[c] == slot && par[e] == slot && tok[c] == tok[e]);
        if (!ok) break;
      }
      s.q_total =
          detail::block_lane_sum([q](std::int64_t i) { return static_cast<double>(q[i]); }, vocab, sh);
      for (std::int32_t c = slot + 1; c < n && next < 0; ++c) {
        if (par[c] != slot) continue;
        const TokenId x = tok[c];
        if (!(q[x] > 0.0f)) {  // it cannot have been sampled
          ok = false;
          break;
        }
        double r_x = 0.0, q_x = 0.0;
        slot_state(s, x, &r_x, &q_x);
        if (uniforms[used++] * q_x < r_x) {
          next = c;
          break;
        }
        // Rejected: the residual's mass, then the new state's scalars.
        const double mass = detail::block_lane_sum(
            [&s](std::int64_t i) {
              double r = 0.0, qq = 0.0;
              slot_state(s, i, &r, &qq);
              const double d = r - qq;
              return 0.0 < d ? d : 0.0;
            },
            vocab, sh);
        if (t == 0) {
          xs[s.rejected] = x;
          masses[s.rejected] = mass;
          rests[s.rejected] = 1.0 - q_x;
        }
        __syncthreads();
        ++s.rejected;
      }
      if (!ok) break;
      if (next < 0) {  // every child rejected: draw from the residual, or P if rounding emptied it
        const double u = uniforms[used++];
        y = detail::block_draw(
            [&s](std::int64_t i) {
              double r = 0.0, qq = 0.0;
              slot_state(s, i, &r, &qq);
              return r;
            },
            vocab, u, sh);
        if (y == kNoToken)
          y = detail::block_draw([p](std::int64_t i) { return static_cast<double>(p[i]); }, vocab, u, sh);
        break;
      }
    }
    if (depth == max_depth) {
      ok = false;
      break;
    }
    if (t == 0) path[depth] = next;
    ++depth;
    slot = next;
  }
  if (t == 0) {
    if (!ok) depth = 0;
    for (std::int32_t j = depth; j < max_depth; ++j) path[j] = -1;
    num_accepted[b] = ok ? depth : -1;
    emitted[b] = ok ? y : kNoToken;
    draws_used[b] = static_cast<std::int32_t>(used);
  }
}

}  // namespace

Status recursive_rejection_sampling(const std::int32_t* parents, const TokenId* tokens,
                                    const std::uint8_t* slot_draws, const float* draft_probs,
                                    const float* target_probs, const std::int32_t* tree_nodes,
                                    std::int32_t* accepted_nodes, std::int32_t* num_accepted,
                                    TokenId* emitted, std::int32_t* draws_used, std::int32_t batch,
                                    std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab,
                                    std::uint64_t seed, std::uint64_t offset, void* stream,
    const PhiloxUniforms* tree_streams) {
  if (batch < 0 || nodes < 0 || nodes == std::numeric_limits<std::int32_t>::max() || max_depth < 0 ||
      max_depth > nodes || vocab <= 0 || vocab > detail::kMaxBlockVocab)
    return Status::kInvalidArgument;
  const std::int64_t rows = static_cast<std::int64_t>(batch) * (static_cast<std::int64_t>(nodes) + 1);
  if (rows > 0 && vocab > std::numeric_limits<std::int64_t>::max() / rows) return Status::kInvalidArgument;
  if (batch == 0) return Status::kOk;
  if (slot_draws == nullptr || target_probs == nullptr || num_accepted == nullptr || emitted == nullptr ||
      draws_used == nullptr || (nodes > 0 && (parents == nullptr || tokens == nullptr)) ||
      (max_depth > 0 && accepted_nodes == nullptr))
    return Status::kInvalidArgument;
  recursive_rejection_sampling_kernel<<<static_cast<unsigned>(batch), kBlock, 0,
                                        static_cast<cudaStream_t>(stream)>>>(
      parents, tokens, slot_draws, draft_probs, target_probs, tree_nodes, accepted_nodes, num_accepted,
      emitted, draws_used, nodes, max_depth, vocab, seed, offset, tree_streams);
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kCudaError;
}

}  // namespace specdec::cuda
