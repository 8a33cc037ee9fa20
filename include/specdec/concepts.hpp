// The component concepts (drafter, tree builder, verifier, acceptance rule,
// length policy, selector, carry-over) and the Model concept (docs/design.md
// §2). Each states the small surface a decoder needs; implementations are
// plain classes and composing templates check them with a readable
// static_assert.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>

#include "specdec/core/draft_tree.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/round.hpp"
#include "specdec/core/target_features.hpp"
#include "specdec/core/types.hpp"
#include "specdec/core/verify_result.hpp"

namespace specdec {

// Named by the concepts below, defined by the components that carry them
// (draft/token_info_table.hpp, engine/stats.hpp): the core does not depend
// on them.
class TokenInfoTable;
struct Stats;

// Walks a drafted tree with target (and draft) distributions and returns the
// accepted path and bonus token. kLossless says whether the output keeps the
// target distribution; kNeedsDraftProbs whether it reads every drafted
// token's draft probability q (so the drafter must provide probabilities:
// RuleFitsDrafter). A rule that is right for greedy decoding only
// (GreedyAcceptance) declares kGreedyOnly: the engine refuses sampled
// requests for it (kRuleGreedyOnly). A rule chosen at run time
// (accept/runtime_rule.hpp) says lossless() and greedy_only() instead, of
// the rule it holds; the engine asks rule_lossless and rule_greedy_only.
template <class R>
concept SaysLossless = requires { R::kLossless; } || requires(const R& rule) { rule.lossless(); };
template <class R>
concept AcceptanceRule = SaysLossless<R> && requires(R& rule, const DraftTree& tree, const ProbRows& target,
                                                     const ProbRows& draft, RandomStream& rng) {
  { rule.verify(tree, target, draft, rng) } -> std::same_as<VerifyResult>;
  { R::kNeedsDraftProbs } -> std::convertible_to<bool>;
};

template <class R>
inline constexpr bool kRuleGreedyOnly = requires { requires R::kGreedyOnly; };

template <AcceptanceRule R>
bool rule_lossless(const R& rule) {
  if constexpr (requires { rule.lossless(); })
    return rule.lossless();
  else
    return R::kLossless;
}
template <AcceptanceRule R>
bool rule_greedy_only(const R& rule) {
  if constexpr (requires { rule.greedy_only(); })
    return rule.greedy_only();
  else
    return kRuleGreedyOnly<R>;
}
// The rule's name for messages: kName, or name() of a rule chosen at run time.
template <AcceptanceRule R>
const char* rule_name(const R& rule) {
  if constexpr (requires { rule.name(); })
    return rule.name();
  else if constexpr (requires { R::kName; })
    return R::kName;
  else
    return "R";
}

// Proposes next-token distributions for frontier nodes of a tree, and keeps
// (or rolls back) its own state as tokens are committed. One drafter follows
// one sequence; a batch has one per request. Lifecycle names after
// llama.cpp's common/speculative: begin, propose, commit.
//   begin(prompt, sampling): a new sequence starts with these tokens, for a
//                           request that samples with `sampling` (a drafter
//                           that warps its rows follows it:
//                           draft_sampling_for, core/sampling_params.hpp)
//   propose(request, rows): append one distribution per frontier slot to rows
//   commit(tokens):         these tokens (accepted drafts + bonus) extend the context
//   end():                  the sequence is over (free its draft cache)
// A feature-level drafter (EAGLE, Lyanna) also has target_features(): the
// TargetFeatures it reads, which the engine hands to the Verifier so the
// target's hidden states of each commit land there (core/target_features.hpp).
// A drafter that warps its rows also says, with sampling(), how its request
// samples: builders that pick a chain's tokens follow it (ChainBuilder: the
// top-1 token for a greedy request, a draw otherwise).
template <class D>
concept Drafter = requires(D& d, const D& cd, std::span<const TokenId> tokens, const SamplingParams& sampling,
                           const DraftRequest& request, ProbMatrix& rows) {
  { cd.vocab_size() } -> std::convertible_to<std::int64_t>;
  d.begin(tokens, sampling);
  d.propose(request, rows);
  d.commit(tokens);
  d.end();
  { D::kProvidesProbs } -> std::convertible_to<bool>;
};

template <class D>
concept FeatureDrafter = Drafter<D> && requires(D& d) {
  { d.target_features() } -> std::same_as<TargetFeatures&>;
};

// A drafter whose N rows of a round do not depend on the drafted tokens
// (Lyanna's hidden-state chain, arXiv 2602.21224 §4.2): one_pass_logits(N)
// returns them all at once, last_logits() the same rows again (still after
// the round's commit, for re-sampling, until the next one_pass_logits), and
// token_info() the per-parent bias the token-info builder adds.
template <class D>
concept OnePassDrafter = Drafter<D> && requires(D& d, const D& cd, std::int32_t steps) {
  { d.one_pass_logits(steps) } -> std::same_as<ProbRows>;
  { cd.last_logits() } -> std::same_as<ProbRows>;
  { cd.token_info() } -> std::same_as<const TokenInfoTable&>;
};

namespace archetypes {
// The least a Drafter can be; TreeBuilder is checked against it, so a builder
// that needs more than the Drafter concept promises fails to satisfy TreeBuilder.
struct Drafter {
  static constexpr bool kProvidesProbs = true;
  std::int64_t vocab_size() const { return 0; }
  void begin(std::span<const TokenId>, const SamplingParams&) {}
  void propose(const DraftRequest&, ProbMatrix&) {}
  void commit(std::span<const TokenId>) {}
  void end() {}
};
}  // namespace archetypes

// Grows a DraftTree rooted at `root` within a budget, asking the drafter for
// distributions; the draft rows the tree's slots refer to go into `rows`.
// BuilderFor<B, D>: B builds with drafter D. TreeBuilder<B>: with any Drafter
// (checked against the least one); a builder that needs more of its drafter
// (TokenInfoTreeBuilder: a OnePassDrafter) is a BuilderFor those only.
template <class B, class D>
concept BuilderFor = requires(B& b, D& drafter, const DraftBudget& budget, TokenId root, RandomStream& rng,
                              DraftTree& tree, ProbMatrix& rows) {
  b.build(drafter, budget, root, rng, tree, rows);
};
template <class B>
concept TreeBuilder = BuilderFor<B, archetypes::Drafter>;

// A drafter that proposes for several sequences in one model forward
// (ModelDrafter: every drafter of the batch shares its model). Row order per
// drafter is propose()'s; the result equals calling each one's propose().
template <class D>
concept BatchDrafter = Drafter<D> && requires(std::span<D* const> drafters, std::span<const DraftRequest> requests,
                                              std::span<ProbMatrix* const> rows) {
  D::propose_batch(drafters, requests, rows);
};

// One request's part in a batched build: what build() takes, per request.
template <class D>
struct BuildItem {
  D* drafter = nullptr;
  DraftBudget budget;
  TokenId root = kNoToken;
  RandomStream* rng = nullptr;
  DraftTree* tree = nullptr;
  ProbMatrix* rows = nullptr;
};
// A builder that drafts several requests' trees in lockstep, one batched
// propose per level (ChainBuilder). Each tree, row and random draw equals
// what build() would give that request alone.
template <class B, class D>
concept BatchBuilderFor = BuilderFor<B, D> && requires(B& b, std::span<const BuildItem<D>> items) {
  b.build_batch(items);
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

// A Verifier that also runs the acceptance rule R itself, where the target's
// rows are (a device verifier: cuda::DeviceVerifier, whose rows never leave
// the GPU). verify_round scores the items as score() would and writes each
// item's outcome to out[i], drawing from rngs[i] exactly the uniforms R
// would draw on the host, from the drafts' rows draft_rows[i] (slot s's row
// at s + 1, as R reads them). The engine then skips its own call of R.
template <class V, class R>
concept RuleVerifier = Verifier<V> && requires(V& v, R& rule, std::span<const ScoreItem> items,
                                               std::span<const ProbRows> draft_rows,
                                               std::span<RandomStream* const> rngs, std::span<VerifyResult> out) {
  v.verify_round(rule, items, draft_rows, rngs, out);
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

// A rule that reads every drafted token's q (R::kNeedsDraftProbs, e.g.
// SpeculativeSampling) needs a drafter whose rows are probabilities
// (D::kProvidesProbs; an n-gram drafter's one-hot guesses are not).
template <class R, class D>
concept RuleFitsDrafter = !R::kNeedsDraftProbs || D::kProvidesProbs;

// Chooses, for a whole step's requests at once, which drafted nodes the
// target verifies (core/round.hpp, Selection): all of them (SelectAll), a
// verify budget (TopNodesSelector), or SV's goodput-optimal allocation across
// the batch. It sees drafted trees only, so it never changes what is emitted
// beyond what the rule's modes account for.
template <class S>
concept Selector = requires(S& s, std::span<Selection> batch) { s.select(batch); };

// A selector that follows each request's committed context (SV's companion
// model keeps a cache per sequence): the engine calls begin when a request
// begins, commit after the target's commit with the verified tree, and end
// when the request finishes.
template <class S>
concept TrackingSelector = Selector<S> && requires(S& s, std::int32_t seq, std::span<const TokenId> prompt,
                                                   const DraftTree& tree, const VerifyResult& result) {
  s.begin(seq, prompt);
  s.commit(seq, tree, result);
  s.end(seq);
};

// What one round hands to the next (docs/design.md §1, carry-over): Lyanna's
// re-sampled tree (arXiv 2602.21224, §5.3, §6.2), DuoDecoding's lagged tail
// (arXiv 2503.00784, §3.1). State is per request. Before drafting, plan()
// says what the round does with a carried tree:
//   kFuse     trie-union it with the fresh tree, one forward (Lyanna fusion)
//   kInstead  verify it in a forward of its own instead of drafting
//   kLagged   verify it (a chain, the tail drafted last round) while the
//             drafter drafts below its tip, concurrently (C::kLags; the
//             engine's DraftWorker runs those drafts)
// After the commit, after() builds what the next round gets from the round's
// trees (CarryRound).
enum class CarryMode : std::uint8_t { kNone, kFuse, kInstead, kLagged };
struct CarryPlan {
  CarryMode mode = CarryMode::kNone;
  const DraftTree* tree = nullptr;  // rooted at this round's root
  ProbRows rows{};                  // the draft rows tree's sampled slots refer to (kLagged)
};
struct CarryRound {
  const DraftTree* verified = nullptr;  // what the target verified
  std::int32_t fresh_nodes = 0;         // verified's first fresh_nodes were drafted this round
  const DraftTree* drafted = nullptr;   // all drafted this round (a lagged round: its tail and what grew below it)
  ProbRows draft_rows{};                // the rows drafted's slots refer to
  const VerifyResult* result = nullptr;
  TokenId next_root = kNoToken;
  std::int32_t room = 0;  // tree nodes the context has room for next round (0: the request is done)
};
template <class C, class D>
concept CarryOver = requires(C& c, typename C::State& state, D& drafter, TokenId root, std::int32_t room,
                             const CarryRound& round, Stats& stats) {
  { c.plan(state, root, room) } -> std::same_as<CarryPlan>;
  c.after(state, drafter, round, stats);
};
// A carry-over whose plan may be kLagged declares kLags; the engine then needs
// a builder that grows a carried tail (GrowsTail).
template <class C>
inline constexpr bool kCarryLags = requires { requires C::kLags; };

// A builder that extends a carried tail: `tree` holds the tail (a chain
// rooted at the round's root, possibly empty) and `rows` its draft rows;
// grow() drafts below the tail's last node within the budget, as if the tail
// were already committed (DuoDecoding, arXiv 2503.00784, §3.1).
template <class B, class D>
concept GrowsTail = requires(B& b, D& drafter, const DraftBudget& budget, RandomStream& rng, DraftTree& tree,
                             ProbMatrix& rows) {
  b.grow(drafter, budget, rng, tree, rows);
};

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
