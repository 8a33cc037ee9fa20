// TLI, token-level intersection (Timor et al., ICML 2025, arXiv 2502.05202,
// §3.3): a draft model with its own vocabulary drafts for the target from the
// tokens both vocabularies share. Each of its rows is restricted to the
// intersection and renormalized,
//   q'(t) = q(d(t)) / sum over shared s of q(d(s))   for t shared, 0 otherwise,
// and handed to the builder as a distribution over the target's vocabulary.
// Every rule then verifies q' as it verifies any draft: q' is a distribution
// over the target's tokens, the drafted tokens are drawn from it (or chosen
// from it), and the rule reads q' itself, so the target's law is kept exactly
// as with a same-vocabulary draft (docs/acceptance.md, "Drafts from another
// vocabulary"). A target token the draft lacks is never drafted; it comes
// from the residual when the target wants it.
//
// The draft reads its own tokens. The prompt is spelled as the draft's
// tokenizer encodes its text; each round's committed target tokens are
// translated one by one (a shared token as itself, another as the draft's
// encoding of its bytes), so drafted nodes the target accepted keep their
// cached keys and values. Trees are drafted through a mirror of the target's
// tree in draft tokens (node i of one is node i of the other), so the inner
// drafter's staging, masks and batching serve unchanged: every builder,
// rule, selector and policy composes with it.
//
// If a warp leaves no mass on the intersection (top-k or top-p kept only
// draft-only tokens), the row is uniform over the shared tokens: any q' is
// lossless, this one keeps the round going.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/concepts.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/draft/vocabulary_map.hpp"

namespace specdec {

// Inner: a drafter over the draft's vocabulary that drafts trees from any
// DraftTree it is handed (ModelDrafter).
template <Drafter Inner>
class IntersectionDrafter {
 public:
  static_assert(
      Inner::kProvidesProbs,
      "IntersectionDrafter restricts the draft's distributions: its inner drafter must provide them");
  static constexpr bool kProvidesProbs = true;

  // `map` (draft -> target) must outlive the drafter and share the inner
  // drafter's vocabulary as its draft side.
  IntersectionDrafter(Inner inner, const VocabularyMap& map) : inner_(std::move(inner)), map_(&map) {
    if (inner_.vocab_size() != map.draft().size())
      throw InvalidArgumentError(
          fmt::format("IntersectionDrafter: the draft model has vocabulary {}, the map's draft "
                      "vocabulary {} has {} tokens",
                      inner_.vocab_size(), map.draft().name(), map.draft().size()));
    if (map.shared() == 0)
      throw InvalidArgumentError(fmt::format("IntersectionDrafter: vocabularies {} and {} share no token",
                                             map.draft().name(), map.target().name()));
  }

  std::int64_t vocab_size() const { return map_->target().size(); }
  // The request's sampling, as the inner drafter holds it: a chain builder
  // following the request (ChainPick::kByRequest) draws for a sampled one.
  const SamplingParams& sampling() const requires requires(const Inner& d) { d.sampling(); }
  { return inner_.sampling(); }
  Inner& inner() { return inner_; }
  const VocabularyMap& map() const { return *map_; }

  void begin(std::span<const TokenId> prompt, const SamplingParams& sampling = {}) {
    if (prompt.empty()) throw InvalidArgumentError("IntersectionDrafter: the prompt is empty");
    draft_tokens_.clear();
    map_->respell(prompt, draft_tokens_);
    if (draft_tokens_.empty())
      throw InvalidArgumentError("IntersectionDrafter: the prompt spells nothing in the draft's vocabulary");
    inner_.begin(draft_tokens_, sampling);
    draft_root_ = draft_tokens_.back();
    mirror_.clear(draft_root_);
  }

  void propose(const DraftRequest& request, ProbMatrix& rows) {
    const auto mirrored = mirror(request);
    const auto first = draft_rows_.num_rows();
    inner_.propose(mirrored, draft_rows_);
    append_restricted(first, rows);
  }

  // propose() for several drafters whose inner drafters draft in one batch.
  static void propose_batch(std::span<IntersectionDrafter* const> drafters,
                            std::span<const DraftRequest> requests,
                            std::span<ProbMatrix* const> rows) requires BatchDrafter<Inner> {
    if (drafters.size() != requests.size() || drafters.size() != rows.size())
      throw ShapeError(
          fmt::format("IntersectionDrafter::propose_batch: {} drafters, {} requests and {} row buffers",
                      drafters.size(), requests.size(), rows.size()));
    std::vector<Inner*> inner;
    std::vector<DraftRequest> mirrored;
    std::vector<ProbMatrix*> draft_rows;
    std::vector<std::int64_t> first;
    for (std::size_t i = 0; i < drafters.size(); ++i) {
      inner.push_back(&drafters[i]->inner_);
      mirrored.push_back(drafters[i]->mirror(requests[i]));
      draft_rows.push_back(&drafters[i]->draft_rows_);
      first.push_back(drafters[i]->draft_rows_.num_rows());
    }
    Inner::propose_batch(std::span<Inner* const>(inner), std::span<const DraftRequest>(mirrored),
                         std::span<ProbMatrix* const>(draft_rows));
    for (std::size_t i = 0; i < drafters.size(); ++i) drafters[i]->append_restricted(first[i], *rows[i]);
  }

  void prefill() requires requires(Inner& d) { d.prefill(); }
  { inner_.prefill(); }

  void commit(std::span<const TokenId> tokens) {
    if (tokens.empty()) return;
    draft_tokens_.clear();
    map_->translate(tokens, draft_tokens_);
    inner_.commit(draft_tokens_);
    if (!draft_tokens_.empty()) draft_root_ = draft_tokens_.back();
    mirror_.clear(draft_root_);
    draft_rows_.clear();
  }

  void end() { inner_.end(); }

 private:
  // The request over the mirror, after adding the target tree's new nodes to
  // it in draft tokens.
  DraftRequest mirror(const DraftRequest& request) {
    if (request.tree == nullptr) throw InvalidArgumentError("IntersectionDrafter: the request has no tree");
    const DraftTree& tree = *request.tree;
    if (tree.size() < mirror_.size())
      throw InvalidArgumentError("IntersectionDrafter: the tree lost nodes between two proposals of a round");
    for (auto i = mirror_.size(); i < tree.size(); ++i) {
      const auto d = map_->to_draft(tree.token(i));
      if (d == kNoToken)
        throw InvalidArgumentError(
            fmt::format("IntersectionDrafter: node {} holds target token {}, which the draft's vocabulary {} "
                        "lacks (only shared "
                        "tokens can be drafted from)",
                        i, tree.token(i), map_->draft().name()));
      mirror_.add_node(tree.parent(i), d, tree.node(i).draft_prob);
    }
    return DraftRequest{&mirror_, request.frontier};
  }

  // Appends q' (see the file comment) for each draft row from `first` on.
  void append_restricted(std::int64_t first, ProbMatrix& rows) {
    expect_draft_vocab(rows, vocab_size(), "IntersectionDrafter");
    const auto pairs = map_->pairs();
    // Every draft token shared: q' is q itself, moved to the target's ids.
    const bool whole = map_->shared() == map_->draft().size();
    for (auto r = first; r < draft_rows_.num_rows(); ++r) {
      const auto q = draft_rows_.row(r);
      auto out = rows.append_row();
      if (whole) {
        for (const auto& [d, t] : pairs) out[static_cast<std::size_t>(t)] = q[static_cast<std::size_t>(d)];
        continue;
      }
      double mass = 0.0;
      for (const auto& [d, t] : pairs) mass += q[static_cast<std::size_t>(d)];
      const float uniform = 1.0f / static_cast<float>(pairs.size());
      for (const auto& [d, t] : pairs)
        out[static_cast<std::size_t>(t)] =
            mass > 0.0 ? static_cast<float>(q[static_cast<std::size_t>(d)] / mass) : uniform;
    }
  }

  Inner inner_;
  const VocabularyMap* map_;
  DraftTree mirror_;
  ProbMatrix draft_rows_;
  std::vector<TokenId> draft_tokens_;
  TokenId draft_root_ = kNoToken;
};

}  // namespace specdec
