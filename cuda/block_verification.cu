// Batched block verification (Sun et al., arXiv 2403.10444, Algorithm 2):
// one block of 1024 threads per chain, and its launcher. The steps of the
// host row function (row_math::block_verification_row) with its vocabulary
// sums and draws spread over the block: block_lane_sum reproduces
// bitexact::lane_sum, the shape row_mass and sampled_residual_mass sum in,
// and block_draw the fixed-point draw. Output is bit-identical to the host
// rule's.
#include <cuda_runtime.h>

#include <cstdint>

#include "block_math.cuh"
#include "chain_rule.cuh"
#include "launch_checks.hpp"
#include "specdec/accept/sequence_row_math.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/cuda/block_verification.hpp"

namespace specdec::cuda {
namespace {

using detail::kBlock;

using detail::ChainOutcome;

// One chain, on one block. The tests run from the last draft back; every
// thread computes the same scalars (the sums are returned to all), so control
// flow stays uniform. draft_row(i): q_i, or null for a deterministic draft.
struct BlockVerificationChain {
  template <class DraftRows>
  __device__ ChainOutcome operator()(DraftRows draft_row, const TokenId* tokens, const float* target_probs,
                                     std::int32_t gamma, std::int64_t vocab, PhiloxUniforms uniforms,
                                     detail::BlockScratch& sh) const {
    const row_math::StridedRows target_row{target_probs, vocab};
    std::int32_t tau = 0;
    double p_tau = 1.0;
    for (std::int32_t i = gamma; i >= 1; --i) {
      const double p = row_math::block_weight(draft_row, tokens, target_row, i);
      if (!(p > 0.0)) continue;
      double h = p;
      if (i < gamma) {
        const float* row = target_row(i);
        const float* q = draft_row(i);
        const double z =
            q != nullptr
                ? detail::block_lane_sum(
                      [=](std::int64_t y) {
                        return row_math::residual_weight(p, static_cast<double>(row[y]), static_cast<double>(q[y]));
                      },
                      vocab, sh)
                : row_math::onehot_residual_mass(
                      p, detail::block_lane_sum([=](std::int64_t y) { return static_cast<double>(row[y]); }, vocab, sh),
                      static_cast<double>(row[tokens[i]]), 1.0);
        h = row_math::weight_after_rejection(p, z);
      }
      if (uniforms[static_cast<std::uint64_t>(i - 1)] < h) {
        tau = i;
        p_tau = p;
        break;
      }
    }
    const double u = uniforms[static_cast<std::uint64_t>(gamma)];
    const float* row = target_row(tau);
    TokenId y = kNoToken;
    if (tau < gamma) {
      const float* q = draft_row(tau);
      const TokenId x = tokens[tau];
      y = q != nullptr ? detail::block_draw(
                             [=](std::int64_t k) {
                               return row_math::residual_weight(p_tau, static_cast<double>(row[k]),
                                                                static_cast<double>(q[k]));
                             },
                             vocab, u, sh)
                       : detail::block_draw([=](std::int64_t k) { return k == x ? 0.0 : static_cast<double>(row[k]); },
                                            vocab, u, sh);  // the row without x
    }
    // The bonus; or, if rounding left the residual empty, the target row itself.
    if (y == kNoToken)
      y = detail::block_draw([=](std::int64_t k) { return static_cast<double>(row[k]); }, vocab, u, sh);
    return {tau, y};
  }
};


}  // namespace

Status block_verification(const float* draft_probs, const TokenId* draft_tokens, const float* target_probs,
                          TokenId* output_tokens, std::int32_t* num_accepted, std::int32_t batch,
                          std::int32_t gamma, std::int64_t vocab, std::uint64_t seed, std::uint64_t offset,
                          void* stream, const PhiloxUniforms* tree_streams) {
  return detail::launch_dense_chain<BlockVerificationChain>(draft_probs, draft_tokens, target_probs, output_tokens,
                                                            num_accepted, batch, gamma, vocab, seed, offset, stream,
                                                            tree_streams);
}

Status block_verification_flat(const std::int32_t* parents, const TokenId* tokens, const std::uint8_t* slot_draws,
                               const float* draft_probs, const float* target_probs, const std::int32_t* tree_nodes,
                               std::int32_t* accepted_nodes, std::int32_t* num_accepted, TokenId* emitted,
                               std::int32_t batch, std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab,
                               std::uint64_t seed, std::uint64_t offset, void* stream,
                               const PhiloxUniforms* tree_streams) {
  return detail::launch_flat_chain<BlockVerificationChain>(parents, tokens, slot_draws, draft_probs, target_probs,
                                                           tree_nodes, accepted_nodes, num_accepted, emitted, batch,
                                                           nodes, max_depth, vocab, seed, offset, stream,
                                                           tree_streams);
}

}  // namespace specdec::cuda
