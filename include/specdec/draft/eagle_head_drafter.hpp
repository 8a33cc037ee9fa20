// Drafter over an EAGLE-style feature head (Li et al., arXiv 2401.15077), the
// baseline Lyanna compares against: token-based autoregression over target
// features, f_v = Layer(fuse(f_parent(v), E(token v))), so each tree level is
// one head forward over the frontier (under the ancestor mask) and a rejected
// token invalidates everything drafted below it. Any tree builder drives it
// (DynamicTreeBuilder gives EAGLE-2).
//
// The root's feature comes from committing the verified tokens with the
// target's hidden states (target_features(), filled by the verifier), exactly
// as LyannaDrafter does; draft rows are the head's logits warped for the
// request's sampling (draft_sampling_for).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "specdec/concepts.hpp"
#include "specdec/core/context_limit.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/target_features.hpp"
#include "specdec/core/warp.hpp"
#include "specdec/draft/feature_head.hpp"

namespace specdec {

template <FeatureHead H>
class EagleHeadDrafter {
 public:
  static constexpr bool kProvidesProbs = true;

  explicit EagleHeadDrafter(H& head) : head_(&head), cursor_(head, "EagleHeadDrafter") {}

  H& head() { return *head_; }
  std::int64_t vocab_size() const { return head_->vocab_size(); }
  std::int64_t max_context() const { return context_limit(*head_); }
  // The verifier writes the target's hidden states of every commit here.
  TargetFeatures& target_features() { return cursor_.features(); }

  // The request's sampling (begin).
  const SamplingParams& sampling() const { return sampling_; }

  void begin(std::span<const TokenId> prompt, const SamplingParams& sampling = {}) {
    sampling.validate();
    cursor_.begin(prompt);
    sampling_ = sampling;
    warp_params_ = draft_sampling_for(sampling);
    staged_ = 0;
  }

  void propose(const DraftRequest& request, ProbMatrix& rows) {
    if (request.tree == nullptr) throw InvalidArgumentError("EagleHeadDrafter: the request has no tree");
    const auto vocab = vocab_size(), d = head_->hidden_size();
    expect_draft_vocab(rows, vocab, "EagleHeadDrafter");
    if (request.frontier.empty()) return;
    const DraftTree& tree = *request.tree;
    if (request.frontier[0] == DraftTree::kRoot) {
      if (request.frontier.size() != 1) throw InvalidArgumentError("EagleHeadDrafter: the root must be proposed alone");
      staged_ = 0;
      node_staged_.clear();
      auto row = rows.append_row();
      if (!cursor_.has_output()) return;  // no target state yet (one-token prompt): no proposal
      logits_.resize(static_cast<std::size_t>(vocab));
      head_->logits(cursor_.output(), logits_);
      warp_(logits_, warp_params_, row);
      return;
    }
    const auto n = static_cast<std::int32_t>(request.frontier.size());
    node_staged_.resize(static_cast<std::size_t>(tree.size()), -1);
    node_features_.resize(static_cast<std::size_t>(tree.size() * d));
    inputs_.resize(static_cast<std::size_t>(n * d));
    tokens_.clear();
    positions_.clear();
    mask_ = BitMatrix(staged_ + n);
    for (std::int32_t i = 0; i < n; ++i) {
      const auto node = request.frontier[static_cast<std::size_t>(i)];
      const auto parent = tree.parent(node);
      if (parent != DraftTree::kRoot && node_staged_[static_cast<std::size_t>(parent)] < 0)
        throw InvalidArgumentError(fmt::format("EagleHeadDrafter: node {} was proposed before its parent {}", node, parent));
      const float* pf = parent == DraftTree::kRoot ? cursor_.output().data() : node_features_.data() + parent * d;
      std::copy_n(pf, d, inputs_.data() + i * d);
      const auto self = staged_ + i;
      mask_.set(self, self);
      for (auto a = parent; a != DraftTree::kRoot; a = tree.parent(a)) mask_.set(self, node_staged_[static_cast<std::size_t>(a)]);
      tokens_.push_back(tree.token(node));
      positions_.push_back(cursor_.root_position() + tree.depth(node));
    }
    outputs_.resize(static_cast<std::size_t>(n * d));
    head_->extend(inputs_, tokens_, positions_, &mask_, outputs_);
    for (std::int32_t i = 0; i < n; ++i) {
      const auto node = request.frontier[static_cast<std::size_t>(i)];
      node_staged_[static_cast<std::size_t>(node)] = staged_ + i;
      std::copy_n(outputs_.data() + i * d, d, node_features_.data() + node * d);
    }
    staged_ += n;
    logits_.resize(static_cast<std::size_t>(n * vocab));
    head_->logits(outputs_, logits_);
    for (std::int32_t i = 0; i < n; ++i)
      warp_(std::span<const float>(logits_).subspan(static_cast<std::size_t>(i * vocab), static_cast<std::size_t>(vocab)),
            warp_params_, rows.append_row());
  }

  void commit(std::span<const TokenId> tokens) {
    cursor_.commit(tokens);
    staged_ = 0;
  }

  void end() { staged_ = 0; }

  double commit_seconds() const { return cursor_.commit_seconds(); }

 private:
  H* head_;
  detail::HeadCursor<H> cursor_;  // the root's feature
  SamplingParams sampling_, warp_params_ = draft_sampling_for(SamplingParams{});  // the request's; the drafts'
  Warper warp_;
  std::vector<float> node_features_, inputs_, outputs_, logits_;
  std::vector<std::int32_t> node_staged_;
  std::int32_t staged_ = 0;
  std::vector<TokenId> tokens_;
  std::vector<std::int64_t> positions_;
  BitMatrix mask_;
};

}  // namespace specdec
