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
#include "specdec/core/target_features.hpp"
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
// (or rolls back) its own state as tokens are committed. One drafter follows
// one sequence; a batch has one per request. Lifecycle names after
// llama.cpp's common/speculative: begin, propose, commit.
//   begin(prompt):          a new sequence starts with these tokens
//   propose(request, rows): append one distribution per frontier slot to rows
//   commit(tokens):         these tokens (accepted drafts + bonus) extend the context
//   end():                  the sequence is over (free its draft cache)
// A feature-level drafter (EAGLE, Lyanna) also has target_features(): the
// TargetFeatures it reads, which the engine hands to the Verifier so the
// target's hidden states of each commit land there (core/target_features.hpp).
template <class D>
concept Drafter = requires(D& d, const D& cd, std::span<const TokenId> tokens,
                           const DraftRequest& request, ProbMatrix& rows) {
  { cd.vocab_size() } -> std::convertible_to<std::int64_t>;
  d.begin(tokens);
  d.propose(request, rows);
  d.commit(tokens);
  d.end();
  { D::kProvidesProbs } -> std::convertible_to<bool>;
};

template <class D>
concept FeatureDrafter = Drafter<D> && requires(D& d) {
  { d.target_features() } -> std::same_as<TargetFeatures&>;
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
  void end() {}
};
}  // namespace archetypes

// Grows a DraftTree rooted at `root` within a budget, asking the drafter for
// distributions; the draft rows the tree's slots refer to go into `rows`.
template <class B>
concept TreeBuilder = requires(B& b, archetypes::Drafter& drafter, const DraftBudget& budget,
                               TokenId root, RandomStream& rng, DraftTree& tree, ProbMatrix& rows) {
  b.build(drafter, budget, root, rng, tree, rows);
};

// Runs the target once over [root, tree nodes] of every item (one sequence
// each) and writes one warped distribution per input (root first) to out[i];
// commit keeps the root and the accepted path in the sequence's target cache
// (the bonus token is the next root). begin(seq, prompt) opens the sequence
// and caches the prompt but its last token, the first root; end(seq) closes
// it. A verifier that can feed feature-level drafters also takes
// begin(seq, prompt, TargetFeatures*) (see FeatureDrafter).
template <class V>
concept Verifier = requires(V& v, std::int32_t seq, std::span<const TokenId> prompt,
                            std::span<const ScoreItem> items, std::span<ProbRows> out, const DraftTree& tree,
                            const VerifyResult& result) {
  v.begin(seq, prompt);
  v.score(items, out);
  v.commit(seq, tree, result);
  v.end(seq);
};

template <class V>
concept FeatureVerifier = Verifier<V> && requires(V& v, std::int32_t seq, std::span<const TokenId> prompt,
                                                  TargetFeatures* features) {
  v.begin(seq, prompt, features);
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

// Chooses, for a whole step's requests at once, which drafted nodes the
// target verifies (core/round.hpp, Selection): all of them (SelectAll), a
// verify budget (TopNodesSelector), or SV's goodput-optimal allocation across
// the batch. It sees drafted trees only, so it never changes what is emitted
// beyond what the rule's modes account for.
template <class S>
concept Selector = requires(S& s, std::span<Selection> batch) { s.select(batch); };

// Sets each round's budget and learns from each round's outcome.
template <class P>
concept LengthPolicy = requires(P& p, const RoundOutcome& outcome) {
  { p.budget() } -> std::same_as<DraftBudget>;
  p.observe(outcome);
};

// A language model with a per-sequence KV cache (target or draft); what a
// host engine implements over its own kernels and cache (docs/integration.md).
//   open(seq, policy): start (or restart) sequence `seq` with an empty cache
//                      kept as `policy` says (CachePolicy); close(seq) frees it
//   forward:           run new tokens (caller's positions, packed ancestor
//                      mask) of several sequences, writing logits / hidden
//                      states into the caller's buffers (ForwardRequest)
//   accept(path):      keep only these new-token indices (root to leaf) of the
//                      last forward, compacted right after the committed prefix
//   rollback(len):     truncate the sequence's committed cache to `len` tokens
//   max_context:       tokens one sequence can hold (decoders stop there)
// Forwards on different sequences may run on different threads; open and
// close must not run concurrently with anything else on the model.
template <class M>
concept Model = requires(M& m, const M& cm, const ForwardRequest& request, std::int32_t seq,
                         const CachePolicy& policy, std::span<const std::int32_t> path, std::int64_t length) {
  { cm.vocab_size() } -> std::convertible_to<std::int64_t>;
  { cm.hidden_size() } -> std::convertible_to<std::int64_t>;
  { cm.max_context() } -> std::convertible_to<std::int64_t>;
  m.open(seq, policy);
  m.close(seq);
  { m.forward(request) } -> std::same_as<void>;
  m.accept(seq, path);
  m.rollback(seq, length);
};

}  // namespace specdec
