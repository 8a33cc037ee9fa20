// Lyanna (Chen et al., arXiv 2602.21224, §4-6; docs/methods.md) is a
// composition of the one round engine's components, not a loop of its own:
//
//   Drafter       LyannaDrafter            hidden-state chain, one-pass logits (§4)
//   TreeBuilder   TokenInfoTreeBuilder     Algorithm 1: token-info sampling, pruned to B (§5.2)
//   LengthPolicy  FixedLength{N, B, B, k}  N chain steps, k branches, B verified nodes
//   CarryOver     LyannaResampling         Algorithm 2 and verification fusion (§5.3, §6.2),
//                 (NoCarryOver without re-sampling)
//   Verifier      any FeatureVerifier      hands the target's hidden states to the drafter
//   Rule          any; every child set is deterministic, verified by the target-only test
//
// This header names the composition and builds it from the paper's knobs.
#pragma once

#include <cstdint>
#include <utility>

#include <fmt/format.h>

#include "specdec/carry/lyanna_resampling.hpp"
#include "specdec/carry/no_carry_over.hpp"
#include "specdec/draft/lyanna_drafter.hpp"
#include "specdec/engine/speculative_decoder.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/tree/token_info_tree.hpp"

namespace specdec {

struct LyannaOptions {
  std::int32_t depth = 3;            // N, chain steps per round
  std::int32_t branch = 4;           // k
  std::int32_t verify_budget = 12;   // B, nodes of the fresh tree
  bool resample = true;              // Algorithm 2
  bool fusion = true;                // §6.2: verify T' with the next round's tree
  std::int32_t resample_threshold = 0;  // r: re-sample only if more than r rows remain
  std::int32_t resample_budget = 4;     // B', nodes of a re-sampled tree

  void validate() const {
    if (depth <= 0 || branch <= 0 || verify_budget <= 0 || resample_budget <= 0 || resample_threshold < 0)
      throw InvalidArgumentError(fmt::format(
          "LyannaOptions: depth ({}), branch ({}), budgets ({}, {}) must be > 0 and the threshold ({}) >= 0", depth,
          branch, verify_budget, resample_budget, resample_threshold));
  }
  TokenInfoTreeBuilder builder() const { return TokenInfoTreeBuilder(branch, verify_budget); }
  FixedLength policy() const { return FixedLength(DraftBudget{depth, verify_budget, verify_budget, 0.0f, branch}); }
  LyannaResampling resampling() const {
    return LyannaResampling(LyannaResamplingOptions{fusion, resample_threshold, resample_budget, branch});
  }
};

// Lyanna with re-sampling (and fusion, as the options say) ...
template <FeatureHead H, FeatureVerifier V, AcceptanceRule R, LengthPolicy P = FixedLength>
using LyannaDecoder =
    SpeculativeDecoder<LyannaDrafter<H>, TokenInfoTreeBuilder, V, R, P, SelectAll, LyannaResampling>;
// ... and without (options.resample false; Table 1's ablation).
template <FeatureHead H, FeatureVerifier V, AcceptanceRule R, LengthPolicy P = FixedLength>
using LyannaDecoderWithoutResampling =
    SpeculativeDecoder<LyannaDrafter<H>, TokenInfoTreeBuilder, V, R, P, SelectAll, NoCarryOver>;

template <FeatureHead H, FeatureVerifier V, AcceptanceRule R>
LyannaDecoder<H, V, R> lyanna_decoder(LyannaDrafter<H>& drafter, V& verifier, R rule, const LyannaOptions& o,
                                      std::int32_t seq = 0) {
  o.validate();
  if (!o.resample)
    throw InvalidArgumentError("lyanna_decoder: options.resample is false; use lyanna_decoder_without_resampling");
  return LyannaDecoder<H, V, R>(drafter, o.builder(), verifier, std::move(rule),
                                o.policy(), seq, SelectAll{}, o.resampling());
}

template <FeatureHead H, FeatureVerifier V, AcceptanceRule R>
LyannaDecoderWithoutResampling<H, V, R> lyanna_decoder_without_resampling(LyannaDrafter<H>& drafter, V& verifier,
                                                                          R rule, const LyannaOptions& o,
                                                                          std::int32_t seq = 0) {
  o.validate();
  return LyannaDecoderWithoutResampling<H, V, R>(drafter, o.builder(), verifier,
                                                 std::move(rule), o.policy(), seq);
}

}  // namespace specdec
