// Verifier over any Model (docs/design.md §1-2): one target forward over the
// root and every tree node under the tree attention mask (SpecInfer, arXiv
// 2305.09781, §4.1-4.2), each row warped with the target's sampling
// parameters; commit keeps the root and the accepted path in the target's
// cache.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "specdec/concepts.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/logit_rows.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/target_features.hpp"
#include "specdec/core/warp.hpp"

namespace specdec {

template <Model M>
class ModelVerifier {
 public:
  // The sequence ids given later must exist in `model` (for the reference
  // model: start_sequence); `sampling` warps every target row.
  ModelVerifier(M& model, const SamplingParams& sampling) : model_(&model), sampling_(sampling) {
    sampling_.validate();
  }

  M& model() { return *model_; }
  std::int64_t max_context() const { return model_->max_context(); }
  const SamplingParams& sampling() const { return sampling_; }

  // Feature-level drafters (EAGLE, Lyanna) read the target's hidden states
  // (after the final norm) of what was committed: with a sink set, begin()
  // writes the prompt prefix's rows and commit() the root's and the accepted
  // path's (core/target_features.hpp). score() then also asks the model for
  // hidden states. Single-sequence decoding only (not score_batch).
  void set_feature_sink(TargetFeatures* features) { features_ = features; }

  // Fills the cache with the prompt minus its last token: that token is the
  // root of the first round, so the first forward that produces logits is
  // already a verification.
  void begin(std::int32_t seq, std::span<const TokenId> prompt) {
    if (prompt.empty()) throw InvalidArgumentError("ModelVerifier: the prompt is empty (it needs at least one token)");
    model_->rollback(seq, 0);
    const auto n = static_cast<std::int64_t>(prompt.size()) - 1;
    if (features_ != nullptr) features_->clear();
    if (n == 0) return;
    positions_.resize(static_cast<std::size_t>(n));
    std::iota(positions_.begin(), positions_.end(), std::int64_t{0});
    const SequenceInput in{seq, prompt.first(static_cast<std::size_t>(n)), positions_, nullptr};
    ForwardRequest request{std::span(&in, 1)};
    request.want_logits = false;
    request.want_hidden = features_ != nullptr;
    const auto out = model_->forward(request);
    if (features_ != nullptr) {
      const auto d = model_->hidden_size();
      features_->assign(logit_rows(out.hidden, n, d, "ModelVerifier (hidden states)").data(), n, d);
    }
    path_.resize(static_cast<std::size_t>(n));
    std::iota(path_.begin(), path_.end(), 0);
    model_->accept(seq, path_);
  }

  // One target forward over several sequences' trees (ragged: each sequence
  // its own prefix length and tree). rows[i] gets sequence i's distributions,
  // as score() would return them; the views stay valid until the next call.
  void score_batch(std::span<const std::int32_t> seqs, std::span<const DraftTree* const> trees,
                   std::vector<ProbRows>& rows) {
    if (seqs.size() != trees.size())
      throw ShapeError(fmt::format("ModelVerifier::score_batch: {} sequences but {} trees", seqs.size(), trees.size()));
    const auto batch = seqs.size();
    std::size_t total = 0;
    for (const auto* t : trees) total += static_cast<std::size_t>(t->size()) + 1;
    batch_tokens_.resize(total);
    batch_positions_.resize(total);
    batch_masks_.resize(batch);
    batch_inputs_.resize(batch);
    std::size_t at = 0;
    for (std::size_t b = 0; b < batch; ++b) {
      const DraftTree& tree = *trees[b];
      const auto n = static_cast<std::size_t>(tree.size()) + 1;
      const auto root_position = model_->cached_length(seqs[b]);
      batch_tokens_[at] = tree.root_token();
      batch_positions_[at] = root_position;
      for (std::int32_t i = 0; i < tree.size(); ++i) {
        batch_tokens_[at + static_cast<std::size_t>(i) + 1] = tree.token(i);
        batch_positions_[at + static_cast<std::size_t>(i) + 1] = root_position + tree.depth(i);
      }
      const bool chain = tree.is_chain();
      if (!chain) batch_masks_[b] = tree.ancestor_mask(/*include_root=*/true);
      batch_inputs_[b] = SequenceInput{seqs[b], std::span(batch_tokens_).subspan(at, n),
                                       std::span(batch_positions_).subspan(at, n), chain ? nullptr : &batch_masks_[b]};
      at += n;
    }
    const auto out = model_->forward(ForwardRequest{batch_inputs_});
    const auto vocab = model_->vocab_size();
    const auto logits = logit_rows(out.logits, static_cast<std::int64_t>(total), vocab, "ModelVerifier");
    rows.resize(batch);
    batch_probs_.resize(static_cast<std::int64_t>(total), vocab);
    at = 0;
    for (std::size_t b = 0; b < batch; ++b) {
      const auto n = static_cast<std::int64_t>(trees[b]->size()) + 1;
      for (std::int64_t r = 0; r < n; ++r) {
        const auto row = static_cast<std::int64_t>(at) + r;
        warp_(logits.row(row), sampling_, batch_probs_.row(row));
      }
      rows[b] = ProbRows(batch_probs_.row(static_cast<std::int64_t>(at)).data(), n, vocab);
      at += static_cast<std::size_t>(n);
    }
  }

  // Target distributions for [root, node 0, ..., node N-1] of `tree`.
  ProbRows score(std::int32_t seq, const DraftTree& tree) {
    const auto n = tree.size() + 1;
    const auto root_position = model_->cached_length(seq);
    tokens_.resize(static_cast<std::size_t>(n));
    positions_.resize(static_cast<std::size_t>(n));
    tokens_[0] = tree.root_token();
    positions_[0] = root_position;
    for (std::int32_t i = 0; i < tree.size(); ++i) {
      tokens_[static_cast<std::size_t>(i) + 1] = tree.token(i);
      positions_[static_cast<std::size_t>(i) + 1] = root_position + tree.depth(i);
    }
    // A chain needs no mask (causal); a tree sends its ancestor mask.
    const bool chain = tree.is_chain();
    if (!chain) mask_ = tree.ancestor_mask(/*include_root=*/true);
    const SequenceInput in{seq, tokens_, positions_, chain ? nullptr : &mask_};
    ForwardRequest request{std::span(&in, 1)};
    request.want_hidden = features_ != nullptr;
    const auto out = model_->forward(request);
    const auto vocab = model_->vocab_size();
    const auto logits = logit_rows(out.logits, n, vocab, "ModelVerifier");
    if (features_ != nullptr) hidden_ = logit_rows(out.hidden, n, model_->hidden_size(), "ModelVerifier (hidden states)");
    if (sampling_.is_greedy()) return one_hot_rows(logits);
    probs_.resize(n, vocab);
    for (std::int64_t r = 0; r < n; ++r) warp_(logits.row(r), sampling_, probs_.row(r));
    return probs_.view();
  }

  // Keeps the root and the accepted nodes (the bonus token is the next root).
  void commit(std::int32_t seq, const DraftTree& tree, const VerifyResult& result) {
    (void)tree;
    path_.assign(1, 0);
    for (const auto node : result.accepted_nodes) path_.push_back(node + 1);
    if (features_ != nullptr) {
      features_->clear();
      for (const auto row : path_) features_->append(hidden_.row(row));
    }
    model_->accept(seq, path_);
  }

 private:
  // Greedy warping without rewriting whole rows: the buffer stays zero except
  // one entry per row, which is cleared before the row is reused (one pass
  // over each logit row, fused with the NaN/+inf check, instead of three).
  ProbRows one_hot_rows(const ProbRows& logits) {
    const auto n = logits.num_rows(), vocab = logits.vocab();
    if (vocab != one_hot_vocab_) {
      one_hot_.clear();
      hot_.clear();
      one_hot_vocab_ = vocab;
    }
    if (static_cast<std::int64_t>(hot_.size()) < n) {
      one_hot_.resize(static_cast<std::size_t>(n * vocab), 0.0f);
      hot_.resize(static_cast<std::size_t>(n), -1);
    }
    for (std::int64_t r = 0; r < n; ++r) {
      const auto row = logits.row(r);
      std::size_t best = 0;
      for (std::size_t i = 0; i < row.size(); ++i) {
        const float v = row[i];
        if (std::isnan(v) || v == std::numeric_limits<float>::infinity())
          throw InvalidDistributionError(fmt::format("ModelVerifier: target logit {} of row {} is {}", i, r, v));
        if (v > row[best]) best = i;
      }
      if (row[best] == -std::numeric_limits<float>::infinity())
        throw InvalidDistributionError(fmt::format("ModelVerifier: every target logit of row {} is -inf", r));
      float* out = one_hot_.data() + r * vocab;
      auto& hot = hot_[static_cast<std::size_t>(r)];
      if (hot >= 0) out[hot] = 0.0f;
      hot = static_cast<std::int64_t>(best);
      out[hot] = 1.0f;
    }
    return {one_hot_.data(), n, vocab};
  }

  M* model_;
  SamplingParams sampling_;
  TargetFeatures* features_ = nullptr;
  ProbRows hidden_;  // hidden states of the last score(), when features_ is set
  std::vector<float> one_hot_;
  std::vector<std::int64_t> hot_;  // the 1 in each row of one_hot_, -1 if none
  std::int64_t one_hot_vocab_ = -1;
  Warper warp_;
  ProbMatrix probs_;
  BitMatrix mask_;
  std::vector<TokenId> tokens_;
  std::vector<std::int64_t> positions_;
  std::vector<std::int32_t> path_;
  // score_batch buffers
  std::vector<TokenId> batch_tokens_;
  std::vector<std::int64_t> batch_positions_;
  std::vector<BitMatrix> batch_masks_;
  std::vector<SequenceInput> batch_inputs_;
  ProbMatrix batch_probs_;
};

}  // namespace specdec
