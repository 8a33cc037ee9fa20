// DuoDecoding's dynamic multi-sequence drafting (Lv et al., arXiv 2503.00784,
// §3.2 and Figure 2; docs/methods.md, DuoDecoding).
//
// With budget gamma (DraftBudget::max_nodes) the builder drafts k sequences of
// s = gamma / k tokens below the tip:
//   q1 = the draft distribution at the tip, c_1 >= c_2 >= ... its top tokens
//   theta = q1(c_1) * max q2, where q2 is the draft distribution after c_1
//           (the chance the top sequence's first two tokens are right)
//   k = 1 + #{j >= 2 : q1(c_j) > theta}, at most max_sequences, then rounded
//       down to a divisor of gamma (so every sequence has the same length)
// Sequence j starts with c_j (deterministic top-k: the target-only rule
// verifies them) and continues by drawing from the draft (top-1 for greedy
// decoding), each sequence's next tokens in one drafter forward. The paper
// drafts the sequences one after another; here they share forwards (a tree
// level per forward), which costs less and drafts the same tokens.
// A static k (MultiSequenceOptions::sequences, the paper's ablation) skips
// theta.
//
// build() drafts at a fresh root; grow() below a carried tail (LaggedTail),
// staging the tail in the drafter's first forward of the round.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "specdec/accept/row_math.hpp"
#include "specdec/concepts.hpp"
#include "specdec/core/warp.hpp"
#include "specdec/tree/child_selection.hpp"

namespace specdec {

struct MultiSequenceOptions {
  std::int32_t max_sequences = 8;  // the paper's cap on k
  std::int32_t sequences = 0;      // 0: dynamic k; otherwise this many (snapped like k)
  // Continuations: drawn from the draft or its top-1, or as the request
  // samples (ChainPick).
  ChainPick pick = ChainPick::kByRequest;

  void validate() const {
    if (max_sequences < 1 || sequences < 0)
      throw InvalidArgumentError(fmt::format(
          "MultiSequenceOptions: max_sequences ({}) must be >= 1 and sequences ({}) >= 0", max_sequences, sequences));
  }
};

// The largest divisor of gamma that is at most k (>= 1).
inline std::int32_t snap_to_divisor(std::int32_t k, std::int32_t gamma) {
  for (auto d = std::min(k, gamma); d > 1; --d)
    if (gamma % d == 0) return d;
  return 1;
}

class MultiSequenceBuilder {
 public:
  static constexpr const char* kName = "MultiSequenceBuilder";

  explicit MultiSequenceBuilder(MultiSequenceOptions options = {}) : options_((options.validate(), options)) {}
  const MultiSequenceOptions& options() const { return options_; }

  template <class D>
  void build(D& drafter, const DraftBudget& budget, TokenId root, RandomStream& rng, DraftTree& tree,
             ProbMatrix& rows) {
    tree.clear(root);
    rows.resize(0, drafter.vocab_size());
    grow(drafter, budget, rng, tree, rows);
  }

  // `tree`: a chain (the carried tail, or nothing) and `rows` its draft rows.
  template <class D>
  void grow(D& drafter, const DraftBudget& budget, RandomStream& rng, DraftTree& tree, ProbMatrix& rows) {
    detail::check_builder_budget(kName, budget);
    if (!tree.is_chain()) throw InvalidTreeError("MultiSequenceBuilder: the carried tail is not a chain");
    const auto vocab = drafter.vocab_size();
    if (rows.num_rows() == 0) rows.resize(0, vocab);
    if (rows.vocab() != vocab)
      throw ShapeError(fmt::format("{}: the tail's draft rows have vocabulary {}, the drafter {}", kName, rows.vocab(),
                                   vocab));
    const std::int32_t gamma = budget.max_nodes;
    if (gamma <= 0 || budget.max_depth <= 0) return;
    const std::int32_t tip = tree.size() - 1;
    // q1: the root, the tail and the tip in the round's first forward.
    frontier_.assign(1, DraftTree::kRoot);
    for (std::int32_t i = 0; i < tree.size(); ++i) frontier_.push_back(i);
    const auto q1_row = detail::propose_level(kName, drafter, tree, frontier_, vocab, rows) + tree.size();
    if (!detail::has_proposal(kName, rows.row(q1_row), q1_row)) return;
    const std::int32_t cap = options_.sequences > 0 ? options_.sequences : options_.max_sequences;
    detail::top_tokens(rows.row(q1_row), std::min(cap, gamma), candidates_);
    tree.set_children_source(tip, static_cast<std::int32_t>(q1_row), ChildMode::kDeterministic);

    ends_.clear();
    end_rows_.clear();
    const auto add_first = [&](TokenId c) {
      ends_.push_back(tree.add_node(tip, c, rows.row(q1_row)[static_cast<std::size_t>(c)]));
      end_rows_.push_back(-1);
    };
    std::int32_t k = static_cast<std::int32_t>(candidates_.size());
    if (options_.sequences == 0 && k > 1) {
      // theta needs q2, the row after c_1.
      add_first(candidates_[0]);
      end_rows_[0] = detail::propose_level(kName, drafter, tree, std::span<const std::int32_t>(ends_.data(), 1), vocab, rows);
      const auto q1 = rows.row(q1_row);
      const double theta = double(q1[static_cast<std::size_t>(candidates_[0])]) * max_of(rows.row(end_rows_[0]));
      k = 1;
      while (k < static_cast<std::int32_t>(candidates_.size()) &&
             double(q1[static_cast<std::size_t>(candidates_[static_cast<std::size_t>(k)])]) > theta)
        ++k;
    }
    k = snap_to_divisor(k, gamma);
    last_sequences_ = k;
    for (auto j = static_cast<std::int32_t>(ends_.size()); j < k; ++j) add_first(candidates_[static_cast<std::size_t>(j)]);
    const std::int32_t length = std::min(gamma / k, budget.max_depth);
    // Continuations, one level (one drafter forward) at a time.
    for (std::int32_t depth = 2; depth <= length && !ends_.empty(); ++depth) {
      pending_.clear();
      for (std::size_t j = 0; j < ends_.size(); ++j)
        if (end_rows_[j] < 0) pending_.push_back(ends_[j]);
      if (!pending_.empty()) {
        auto row = detail::propose_level(kName, drafter, tree, pending_, vocab, rows);
        for (std::size_t j = 0; j < ends_.size(); ++j)
          if (end_rows_[j] < 0) end_rows_[j] = row++;
      }
      const bool sample = draws_chain(options_.pick, drafter);
      std::size_t alive = 0;
      for (std::size_t j = 0; j < ends_.size(); ++j) {
        const auto row_index = end_rows_[j];
        const auto row = rows.row(row_index);
        if (!detail::has_proposal(kName, row, row_index)) continue;  // this sequence ends here
        const TokenId t = sample ? row_math::sample_row(row.data(), static_cast<std::int64_t>(row.size()), rng.uniform())
                        : argmax(row);
        const float q = row[static_cast<std::size_t>(t)];
        tree.set_children_source(ends_[j], static_cast<std::int32_t>(row_index),
                                 sample ? ChildMode::kSampledWithReplacement : ChildMode::kDeterministic);
        const auto node = tree.add_node(ends_[j], t, q);
        if (q < budget.stop_below) continue;  // the confidence stop: no further tokens for this one
        ends_[alive] = node;
        end_rows_[alive] = -1;
        ++alive;
      }
      ends_.resize(alive);
      end_rows_.resize(alive);
    }
  }

  // k of the last grow() (0 before any).
  std::int32_t last_sequences() const { return last_sequences_; }

 private:
  static double max_of(std::span<const float> row) {
    float best = 0.0f;
    for (const float v : row) best = std::max(best, v);
    return best;
  }

  MultiSequenceOptions options_;
  std::vector<std::int32_t> frontier_, ends_, pending_;
  std::vector<std::int64_t> end_rows_;
  std::vector<TokenId> candidates_;
  std::int32_t last_sequences_ = 0;
};

}  // namespace specdec
