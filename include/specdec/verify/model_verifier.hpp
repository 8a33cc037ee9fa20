// Verifier over any Model (docs/design.md §1-2): one target forward over the
// root and every tree node of every scored sequence, under the tree attention
// mask (SpecInfer, arXiv 2305.09781, §4.1-4.2), each sequence's rows warped
// with its request's sampling parameters (ScoreItem::sampling, so greedy and
// sampled requests share a forward); commit keeps the root and the accepted path
// in the target's cache. It tracks each sequence's committed length itself
// and passes positions to the model (a sink + window cache holds fewer
// tokens than the position says).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/concepts.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/logit_rows.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/row_kernels.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/target_features.hpp"
#include "specdec/core/warp.hpp"

namespace specdec {

template <Model M>
class ModelVerifier {
 public:
  // `cache` is the policy each sequence is opened with (begin() opens it in
  // the model, end() closes it).
  explicit ModelVerifier(M& model, const CachePolicy& cache = {}) : model_(&model), cache_(cache) {}

  M& model() { return *model_; }
  std::int64_t max_context() const { return model_->max_context(); }
  // Which of the target's activations the feature sinks receive: `count`
  // consecutive layers' outputs from layer `first` on, side by side in each
  // row (ForwardRequest::hidden_layer / hidden_layers). The default, -1 and
  // 1, is the final-norm hidden state the EAGLE and Lyanna heads read; a
  // SPIRe draft reads the inputs of the target layers it was pruned from.
  void set_feature_layers(std::int32_t first, std::int32_t count) {
    if (count < 1 || first < -1 || (first == -1 && count != 1))
      throw InvalidArgumentError(
          fmt::format("ModelVerifier::set_feature_layers: {} layer(s) from layer {} (first >= -1, count >= 1; "
                      "count 1 for the final norm's -1)",
                      count, first));
    feature_first_ = first;
    feature_count_ = count;
  }
  std::int64_t feature_width() const { return feature_count_ * model_->hidden_size(); }
  // Tokens committed to sequence `seq`: the next root's position.
  std::int64_t committed_length(std::int32_t seq) const { return state(seq).length; }

  // Opens `seq` and fills its cache with the prompt minus its last token:
  // that token is the root of the first round, so the first forward that
  // produces logits is already a verification.
  //
  // Feature-level drafters (EAGLE, Lyanna) read the target's hidden states
  // (after the final norm) of what was committed: with `features` given,
  // begin() writes the prompt prefix's rows there and every commit() the
  // root's and the accepted path's (core/target_features.hpp). Each sequence
  // has its own, so feature drafters batch.
  void begin(std::int32_t seq, std::span<const TokenId> prompt, TargetFeatures* features = nullptr) {
    if (prompt.empty()) throw InvalidArgumentError("ModelVerifier: the prompt is empty (it needs at least one token)");
    model_->open(seq, cache_);
    auto& s = seqs_[seq];
    s = Sequence{0, features, -1};
    const auto n = static_cast<std::int64_t>(prompt.size()) - 1;
    if (features != nullptr) features->clear();
    if (n == 0) return;
    positions_.resize(static_cast<std::size_t>(n));
    std::iota(positions_.begin(), positions_.end(), std::int64_t{0});
    const SequenceInput in{seq, prompt.first(static_cast<std::size_t>(n)), positions_};
    ForwardRequest request{std::span(&in, 1)};
    if (features != nullptr) want_features(request, n);
    try {
      model_->forward(request);
    } catch (...) {  // the sequence never began: closed again
      seqs_.erase(seq);
      model_->close(seq);
      throw;
    }
    if (features != nullptr) {
      const auto d = feature_width();
      features->assign(hidden_.written(request.hidden, n, d, "ModelVerifier (hidden states)").data(), n, d);
    }
    path_.resize(static_cast<std::size_t>(n));
    std::iota(path_.begin(), path_.end(), 0);
    model_->accept(seq, path_);
    s.length = n;
  }

  // One target forward over every item's root and tree (ragged: each
  // sequence its own prefix length and tree). out[i] gets item i's
  // distributions for [root, node 0, ..., node N-1], warped with
  // items[i].sampling; the views stay valid until the next call.
  void score(std::span<const ScoreItem> items, std::span<ProbRows> out) {
    if (items.size() != out.size())  // before the forward
      throw ShapeError(fmt::format("ModelVerifier::score: {} items but {} outputs", items.size(), out.size()));
    const auto rows = forward_rows(items);
    const auto vocab = model_->vocab_size();
    const auto logits =
        logits_.written(forward_into(items, logits_.view(rows, vocab)), rows, vocab, "ModelVerifier");
    warp_into(items, logits, out);
  }

  // The warp of score(): out[b] gets item b's rows of `logits` (a forward's
  // rows, item after item) warped with items[b].sampling; the views stay
  // valid until the next call. A verifier whose model computes elsewhere
  // (DeviceVerifier) warps the rows it brought back here.
  void warp_into(std::span<const ScoreItem> items, const ProbRows& logits, std::span<ProbRows> out) {
    if (items.size() != out.size())
      throw ShapeError(fmt::format("ModelVerifier::warp_into: {} items but {} outputs", items.size(), out.size()));
    const auto rows = forward_rows(items), vocab = logits.vocab();
    if (logits.num_rows() != rows)
      throw ShapeError(fmt::format("ModelVerifier::warp_into: the items have {} rows, the logits {}", rows,
                                   logits.num_rows()));
    // Each item's rows are warped with its own parameters: greedy rows into
    // the one-hot buffer, sampled rows into probs_ (row r of the forward is
    // row r of either).
    std::int64_t first = 0;
    for (std::size_t b = 0; b < items.size(); ++b) {
      const auto n = std::int64_t{items[b].tree->size()} + 1;
      const SamplingParams& sampling = items[b].sampling;
      if (sampling.is_greedy()) {
        one_hot_rows(logits, first, n);
        out[b] = ProbRows(one_hot_.data() + first * vocab, n, vocab);
      } else {
        if (probs_.num_rows() < rows || probs_.vocab() != vocab) probs_.resize(rows, vocab);
        for (auto r = first; r < first + n; ++r) warp_(logits.row(r), sampling, probs_.row(r));
        out[b] = ProbRows(probs_.row(first).data(), n, vocab, probs_.view().row_stride());
      }
      first += n;
    }
  }

  // Rows of the forward over `items`: the root and every node of each tree.
  // Throws InvalidArgumentError for an item without a tree.
  static std::int64_t forward_rows(std::span<const ScoreItem> items) {
    std::int64_t total = 0;
    for (const auto& item : items) {
      if (item.tree == nullptr) throw InvalidArgumentError("ModelVerifier: an item has no tree");
      total += std::int64_t{item.tree->size()} + 1;
    }
    return total;
  }

  // The forward of score() without the warp: one target forward over the
  // items, item after item ([root, node 0, ...] each), its logits written to
  // `logits` ([forward_rows(items), vocab]; device memory for a model that
  // computes there, as DeviceVerifier gives it). Returns the request's
  // logits view as the model left it. Each item's sampling is checked.
  TensorView forward_into(std::span<const ScoreItem> items, TensorView logits) {
    const auto total = static_cast<std::size_t>(forward_rows(items));
    for (const auto& item : items) item.sampling.validate();
    tokens_.resize(total);
    positions_.resize(total);
    masks_.resize(items.size());
    inputs_.resize(items.size());
    bool want_hidden = false;
    std::size_t at = 0;
    for (std::size_t b = 0; b < items.size(); ++b) {
      const DraftTree& tree = *items[b].tree;
      auto& s = state(items[b].seq);
      const auto n = static_cast<std::size_t>(tree.size()) + 1;
      tokens_[at] = tree.root_token();
      positions_[at] = s.length;
      for (std::int32_t i = 0; i < tree.size(); ++i) {
        tokens_[at + static_cast<std::size_t>(i) + 1] = tree.token(i);
        positions_[at + static_cast<std::size_t>(i) + 1] = s.length + tree.depth(i);
      }
      // A chain needs no mask (causal); a tree sends its ancestor mask.
      PackedMask mask;
      if (!tree.is_chain()) {
        masks_[b] = tree.ancestor_mask(/*include_root=*/true);
        mask = PackedMask::of(masks_[b]);
      }
      inputs_[b] = SequenceInput{items[b].seq, std::span(tokens_).subspan(at, n), std::span(positions_).subspan(at, n),
                                 mask};
      s.row = static_cast<std::int64_t>(at);
      want_hidden |= s.features != nullptr;
      at += n;
    }
    const auto rows = static_cast<std::int64_t>(total);
    ForwardRequest request{inputs_};
    request.logits = logits;
    if (want_hidden) want_features(request, rows);
    model_->forward(request);
    if (want_hidden)
      hidden_rows_ = hidden_.written(request.hidden, rows, feature_width(), "ModelVerifier (hidden states)");
    return request.logits;
  }

  // One sequence's tree: score() of a single item.
  ProbRows score(std::int32_t seq, const DraftTree& tree, const SamplingParams& sampling) {
    const ScoreItem item{seq, &tree, sampling};
    ProbRows rows;
    score(std::span(&item, 1), std::span(&rows, 1));
    return rows;
  }

  // Keeps the root and the accepted nodes of `seq`'s tree in the last score()
  // (the bonus token is the next root).
  void commit(std::int32_t seq, const DraftTree& tree, const VerifyResult& result) {
    (void)tree;
    auto& s = state(seq);
    if (s.row < 0) throw InvalidArgumentError(fmt::format("ModelVerifier::commit: sequence {} was not scored", seq));
    path_.assign(1, 0);
    for (const auto node : result.accepted_nodes) path_.push_back(node + 1);
    if (s.features != nullptr) {
      s.features->clear();
      for (const auto r : path_) s.features->append(hidden_rows_.row(s.row + r));
    }
    model_->accept(seq, path_);
    s.length += static_cast<std::int64_t>(path_.size());
    s.row = -1;
  }

  // The sequence is over: its target cache is freed.
  void end(std::int32_t seq) {
    state(seq);
    seqs_.erase(seq);
    model_->close(seq);
  }

 private:
  struct Sequence {
    std::int64_t length = 0;                // committed tokens: the next root's position
    TargetFeatures* features = nullptr;     // where commits write hidden states, if anyone reads them
    std::int64_t row = -1;                  // the sequence's first row in the last score(), -1 if none
  };
  // Asks `request` for the feature rows of its `rows` tokens.
  void want_features(ForwardRequest& request, std::int64_t rows) {
    request.hidden = hidden_.view(rows, feature_width());
    request.hidden_layer = feature_first_;
    request.hidden_layers = feature_count_;
  }
  Sequence& state(std::int32_t seq) { return const_cast<Sequence&>(std::as_const(*this).state(seq)); }
  const Sequence& state(std::int32_t seq) const {
    const auto it = seqs_.find(seq);
    if (it == seqs_.end())
      throw InvalidArgumentError(fmt::format("ModelVerifier: sequence {} was not begun (begin)", seq));
    return it->second;
  }

  // Greedy warping without rewriting whole rows: the buffer stays zero except
  // one entry per row, which is cleared before the row is reused (per row,
  // a vectorized max scan with the NaN/+inf check and a search for the max's
  // first index; row_kernels.hpp).
  // Warps rows [first, first + n) of `logits` into the same rows of one_hot_.
  void one_hot_rows(const ProbRows& logits, std::int64_t first, std::int64_t n) {
    const auto vocab = logits.vocab(), rows = logits.num_rows();
    if (vocab != one_hot_vocab_) {
      one_hot_.clear();
      hot_.clear();
      one_hot_vocab_ = vocab;
    }
    if (static_cast<std::int64_t>(hot_.size()) < rows) {
      one_hot_.resize(static_cast<std::size_t>(rows * vocab), 0.0f);
      hot_.resize(static_cast<std::size_t>(rows), -1);
    }
    for (auto r = first; r < first + n; ++r) {
      const auto row = logits.row(r);
      const auto scan = row_kernels::max_scan(row.data(), vocab);
      if (scan.bad)
        for (std::size_t i = 0; i < row.size(); ++i)
          if (std::isnan(row[i]) || row[i] == std::numeric_limits<float>::infinity())
            throw InvalidDistributionError(fmt::format("ModelVerifier: target logit {} of row {} is {}", i, r, row[i]));
      if (scan.max == -std::numeric_limits<float>::infinity())
        throw InvalidDistributionError(fmt::format("ModelVerifier: every target logit of row {} is -inf", r));
      const auto best = row_kernels::first_equal(row.data(), vocab, scan.max);
      float* out = one_hot_.data() + r * vocab;
      auto& hot = hot_[static_cast<std::size_t>(r)];
      if (hot >= 0) out[hot] = 0.0f;
      hot = static_cast<std::int64_t>(best);
      out[hot] = 1.0f;
    }
  }

  M* model_;
  CachePolicy cache_;
  std::int32_t feature_first_ = -1, feature_count_ = 1;  // set_feature_layers
  std::unordered_map<std::int32_t, Sequence> seqs_;
  HostRows logits_, hidden_;  // this verifier's output buffers
  ProbRows hidden_rows_;      // hidden states of the last score(), when some sequence reads them
  std::vector<float> one_hot_;
  std::vector<std::int64_t> hot_;  // the 1 in each row of one_hot_, -1 if none
  std::int64_t one_hot_vocab_ = -1;
  Warper warp_;
  ProbMatrix probs_;
  std::vector<BitMatrix> masks_;
  std::vector<TokenId> tokens_;
  std::vector<std::int64_t> positions_;
  std::vector<SequenceInput> inputs_;
  std::vector<std::int32_t> path_;
};

}  // namespace specdec
