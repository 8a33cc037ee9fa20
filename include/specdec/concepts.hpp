// The five component concepts and the Model concept (docs/design.md §2). Each
// states the small surface a decoder needs; implementations are plain classes
// and composing templates check them with a readable static_assert.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>

#include "specdec/core/draft_tree.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/round.hpp"
#include "specdec/core/types.hpp"
#include "specdec/core/verify_result.hpp"

namespace specdec {

// Walks a drafted tree with target (and draft) distributions and returns the
// accepted path and bonus token. kLossless says whether the output keeps the
// target distribution; kNeedsDraftProbs whether sampled drafts' q is read.
template <class R>
concept AcceptanceRule = requires(R& rule, const DraftTree& tree, const ProbRows& target,
                                  const ProbRows& draft, RandomStream& rng) {
  { rule.verify(tree, target, draft, rng) } -> std::same_as<VerifyResult>;
  { R::kLossless } -> std::convertible_to<bool>;
  { R::kNeedsDraftProbs } -> std::convertible_to<bool>;
};

// Proposes next-token distributions for frontier nodes of a tree, and keeps
// (or rolls back) its own state as tokens are committed. Lifecycle names after
// llama.cpp's common/speculative: begin, propose, commit.
//   begin(prompt):          a new sequence starts with these tokens
//   propose(request, rows): append one distribution per frontier slot to rows
//   commit(tokens):         these tokens (accepted drafts + bonus) extend the context
template <class D>
concept Drafter = requires(D& d, const D& cd, std::span<const TokenId> tokens,
                           const DraftRequest& request, ProbMatrix& rows) {
  { cd.vocab_size() } -> std::convertible_to<std::int64_t>;
  d.begin(tokens);
  d.propose(request, rows);
  d.commit(tokens);
  { D::kProvidesProbs } -> std::convertible_to<bool>;
};

namespace archetypes {
// The least a Drafter can be; TreeBuilder is checked against it, so a builder
// that needs more than the Drafter concept promises fails to satisfy TreeBuilder.
struct Drafter {
  static constexpr bool kProvidesProbs = true;
  std::int64_t vocab_size() const { return 0; }
  void begin(std::span<const TokenId>) {}
  void propose(const DraftRequest&, ProbMatrix&) {}
  void commit(std::span<const TokenId>) {}
};
}  // namespace archetypes

// Grows a DraftTree rooted at `root` within a budget, asking the drafter for
// distributions; the draft rows the tree's slots refer to go into `rows`.
template <class B>
concept TreeBuilder = requires(B& b, archetypes::Drafter& drafter, const DraftBudget& budget,
                               TokenId root, RandomStream& rng, DraftTree& tree, ProbMatrix& rows) {
  b.build(drafter, budget, root, rng, tree, rows);
};

// Runs the target over [root, tree nodes] for sequence `seq` and returns one
// warped distribution per input (root first); commit keeps the root and the
// accepted path in the target's cache (the bonus token is the next root).
// begin(seq, prompt) caches the prompt but its last token, the first root.
template <class V>
concept Verifier = requires(V& v, std::int32_t seq, std::span<const TokenId> prompt, const DraftTree& tree,
                            const VerifyResult& result) {
  v.begin(seq, prompt);
  { v.score(seq, tree) } -> std::same_as<ProbRows>;
  v.commit(seq, tree, result);
};

// A rule that verifies chains only (R::kChainOnly, e.g. SpeculativeSampling)
// needs a builder that builds nothing but chains (B::kBuildsChainsOnly, e.g.
// ChainBuilder). Decoders static_assert this, so the pairing fails to compile
// instead of throwing on the first round.
template <class R>
inline constexpr bool kVerifiesChainsOnly = requires { requires R::kChainOnly; };
template <class B>
inline constexpr bool kBuildsChainsOnly = requires { requires B::kBuildsChainsOnly; };
template <class B, class R>
concept RuleFitsBuilder = !kVerifiesChainsOnly<R> || kBuildsChainsOnly<B>;

// Sets each round's budget and learns from each round's outcome.
template <class P>
concept LengthPolicy = requires(P& p, const RoundOutcome& outcome) {
  { p.budget() } -> std::same_as<DraftBudget>;
  p.observe(outcome);
};

// A language model with a per-sequence KV cache (target or draft).
//   forward:       run new tokens (positions, ancestor mask) of several sequences
//   accept(path):  keep only these new-token indices (root to leaf) of the last
//                  forward, compacted right after the committed prefix
//   rollback(len): truncate the sequence's cache to `len` tokens
//   max_context:   tokens one sequence can hold (decoders stop there)
template <class M>
concept Model = requires(M& m, const M& cm, const ForwardRequest& request, std::int32_t seq,
                         std::span<const std::int32_t> path, std::int64_t length) {
  { cm.vocab_size() } -> std::convertible_to<std::int64_t>;
  { cm.hidden_size() } -> std::convertible_to<std::int64_t>;
  { cm.cached_length(seq) } -> std::convertible_to<std::int64_t>;
  { cm.max_context() } -> std::convertible_to<std::int64_t>;
  { m.forward(request) } -> std::same_as<ForwardResult>;
  m.accept(seq, path);
  m.rollback(seq, length);
};

}  // namespace specdec
