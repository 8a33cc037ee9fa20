// A Verifier over a Model that computes on a CUDA device: its forward writes
// the round's logits into device memory, and the warp and the acceptance rule
// run there (DeviceRound), so a step moves the trees in and the accepted
// paths out, with one synchronisation (docs/cuda.md, "The device round").
//
// With the rules that have a device kernel (GreedyAcceptance,
// RecursiveRejectionSampling, TraversalVerification, TypicalAcceptance, and
// for chains SpeculativeSampling and BlockVerification) the engine hands it
// the accept step (RuleVerifier): each request's rule draws
// from the request's own stream on the device, exactly the uniforms the host
// rule would, so greedy and sampled requests emit the host path's tokens; a
// rule chosen at run time (RuntimeRule) runs the kernel of the rule it holds.
// With any other rule the engine calls score(), which brings the rows back
// and warps them on the host (ModelVerifier's path).
//
// What a model M must do for it: write ForwardRequest::logits where the view
// points (a device view, Device{kCUDA, index}), as a CUDA model does; hidden
// states, for feature drafters, stay host views. Draft rows come from the
// drafters as ProbRows in host or device memory: each round copies the rows
// of its sampled slots into the rules' layout (DeviceRound::set_draft_rows).
//
// No CUDA headers needed (link specdec::cuda).
#pragma once

#include <concepts>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/accept/block_verification.hpp"
#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/accept/runtime_rule.hpp"
#include "specdec/accept/speculative_sampling.hpp"
#include "specdec/accept/traversal_verification.hpp"
#include "specdec/accept/typical_acceptance.hpp"
#include "specdec/concepts.hpp"
#include "specdec/core/logit_rows.hpp"
#include "specdec/cuda/device_round.hpp"
#include "specdec/verify/model_verifier.hpp"

namespace specdec::cuda {

// The device kernel of a host rule, where there is one.
template <class R>
inline constexpr bool kHasDeviceRule =
    std::same_as<R, GreedyAcceptance> || std::same_as<R, RecursiveRejectionSampling> ||
    std::same_as<R, TraversalVerification> || std::same_as<R, TypicalAcceptance> ||
    std::same_as<R, SpeculativeSampling> || std::same_as<R, BlockVerification>;

template <class R>
requires kHasDeviceRule<R>
constexpr DeviceRule device_rule_of() {
  if constexpr (std::same_as<R, GreedyAcceptance>)
    return DeviceRule::kGreedy;
  else if constexpr (std::same_as<R, RecursiveRejectionSampling>)
    return DeviceRule::kRecursiveRejection;
  else if constexpr (std::same_as<R, TraversalVerification>)
    return DeviceRule::kTraversal;
  else if constexpr (std::same_as<R, SpeculativeSampling>)
    return DeviceRule::kSpeculative;
  else if constexpr (std::same_as<R, BlockVerification>)
    return DeviceRule::kBlock;
  else
    return DeviceRule::kTypical;
}

template <Model M>
class DeviceVerifier {
 public:
  // `stream`: the cudaStream_t the round's copies and kernels run on (null:
  // the legacy default stream; the model's forward must be ordered before
  // it, e.g. on the same stream). `device`: where the model writes logits.
  explicit DeviceVerifier(M& model, const CachePolicy& cache = {}, void* stream = nullptr,
                          Device device = {DeviceKind::kCUDA, 0})
      : inner_(model, cache), round_(stream), device_(device) {}

  M& model() { return inner_.model(); }
  DeviceRound& round() { return round_; }
  std::int64_t max_context() const { return inner_.max_context(); }
  std::int64_t committed_length(std::int32_t seq) const { return inner_.committed_length(seq); }

  void begin(std::int32_t seq, std::span<const TokenId> prompt, TargetFeatures* features = nullptr) {
    inner_.begin(seq, prompt, features);
  }
  void commit(std::int32_t seq, const DraftTree& tree, const VerifyResult& result) {
    inner_.commit(seq, tree, result);
  }
  void end(std::int32_t seq) { inner_.end(seq); }

  // The host path (rules without a device kernel, tools that read rows):
  // the forward on the device, its rows brought back and warped here.
  void score(std::span<const ScoreItem> items, std::span<ProbRows> out) {
    if (items.size() != out.size())
      throw ShapeError(
          fmt::format("DeviceVerifier::score: {} items but {} outputs", items.size(), out.size()));
    const auto rows = forward(items);
    const auto vocab = inner_.model().vocab_size();
    host_logits_.resize(static_cast<std::size_t>(rows * vocab));
    round_.download_logits(host_logits_.data(), rows, vocab);
    inner_.warp_into(items, ProbRows(host_logits_.data(), rows, vocab), out);
  }

  // A rule chosen at run time: the round of the rule it holds (each of its
  // choices has a kernel).
  template <bool kChains, bool kProbs>
  void verify_round(const RuntimeRule<kChains, kProbs>& rule, std::span<const ScoreItem> items,
                    std::span<const ProbRows> draft_rows, std::span<RandomStream* const> rngs,
                    std::span<VerifyResult> out) {
    rule.visit([&](const auto& held) { verify_round(held, items, draft_rows, rngs, out); });
  }

  // The round on the device: the forward, then the warp and rule R's kernel
  // over the whole batch; out[i] is item i's outcome, and rngs[i] moves on by
  // the uniforms its tree used (RuleVerifier).
  template <class R>
  requires kHasDeviceRule<R>
  void verify_round(const R& rule, std::span<const ScoreItem> items, std::span<const ProbRows> draft_rows,
                    std::span<RandomStream* const> rngs, std::span<VerifyResult> out) {
    if (draft_rows.size() != items.size() || rngs.size() != items.size() || out.size() != items.size())
      throw ShapeError(
          fmt::format("DeviceVerifier::verify_round: {} items, {} draft rows, {} streams, {} outputs",
                      items.size(), draft_rows.size(), rngs.size(), out.size()));
    forward(items);
    const auto vocab = inner_.model().vocab_size();
    round_items_.clear();
    for (std::size_t i = 0; i < items.size(); ++i)
      round_items_.push_back(
          DeviceRoundItem{items[i].tree, items[i].sampling,
                          PhiloxUniforms{rngs[i]->seed(), rngs[i]->stream(), rngs[i]->offset()}});
    layout_.assign(round_items_);
    constexpr DeviceRule kRule = device_rule_of<R>();
    // Only the rules that read draft rows, and only when a slot was sampled.
    bool draft = false;
    if constexpr (rule_reads_draft_rows(kRule))
      for (const auto d : layout_.trees().draws()) draft |= d != 0;
    if (draft) round_.set_draft_rows(layout_, draft_rows, vocab);
    used_.resize(items.size());
    if constexpr (kRule == DeviceRule::kTypical) {
      round_.verify(layout_, kRule, vocab, draft, out, used_, rule.params());
    } else {
      (void)rule;  // the other rules have no parameters
      round_.verify(layout_, kRule, vocab, draft, out, used_);
    }
    for (std::size_t i = 0; i < items.size(); ++i) rngs[i]->take(static_cast<std::uint64_t>(used_[i]));
  }

 private:
  // The target's forward over the items, into the round's device logits.
  std::int64_t forward(std::span<const ScoreItem> items) {
    const auto rows = ModelVerifier<M>::forward_rows(items);
    const auto vocab = inner_.model().vocab_size();
    float* logits = round_.logits(rows, vocab);
    inner_.forward_into(items, TensorView(logits, DType::kF32, {rows, vocab}, device_));
    return rows;
  }

  ModelVerifier<M> inner_;  // the sequences, the forward's inputs, the host warp
  DeviceRound round_;
  Device device_;
  DeviceRoundLayout layout_;
  std::vector<DeviceRoundItem> round_items_;
  std::vector<std::int32_t> used_;
  std::vector<float> host_logits_;
};

}  // namespace specdec::cuda
