// Compile-time checks: an archetype of each concept satisfies it, and a type
// that misses one member does not (so the concepts actually constrain).
#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/accept/speculative_sampling.hpp"
#include "specdec/accept/typical_acceptance.hpp"
#include "specdec/concepts.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/timed_model.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/tree/dynamic_tree_builder.hpp"
#include "specdec/tree/static_tree_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "support/catch.hpp"

namespace sd = specdec;

namespace {

struct RuleArchetype {
  static constexpr bool kLossless = true;
  static constexpr bool kNeedsDraftProbs = false;
  sd::VerifyResult verify(const sd::DraftTree&, const sd::ProbRows&, const sd::ProbRows&, sd::RandomStream&) {
    return {};
  }
};
struct RuleWithoutLosslessTrait {
  static constexpr bool kNeedsDraftProbs = false;
  sd::VerifyResult verify(const sd::DraftTree&, const sd::ProbRows&, const sd::ProbRows&, sd::RandomStream&) {
    return {};
  }
};
struct RuleReturningWrongType {
  static constexpr bool kLossless = true;
  static constexpr bool kNeedsDraftProbs = false;
  int verify(const sd::DraftTree&, const sd::ProbRows&, const sd::ProbRows&, sd::RandomStream&) { return 0; }
};

struct DrafterArchetype {
  static constexpr bool kProvidesProbs = true;
  std::int64_t vocab_size() const { return 8; }
  void begin(std::span<const sd::TokenId>, const sd::SamplingParams&) {}
  void propose(const sd::DraftRequest&, sd::ProbMatrix&) {}
  void commit(std::span<const sd::TokenId>) {}
  void end() {}
};
struct DrafterWithoutCommit {
  static constexpr bool kProvidesProbs = true;
  std::int64_t vocab_size() const { return 8; }
  void begin(std::span<const sd::TokenId>, const sd::SamplingParams&) {}
  void propose(const sd::DraftRequest&, sd::ProbMatrix&) {}
};

struct BuilderArchetype {
  template <sd::Drafter D>
  void build(D& drafter, const sd::DraftBudget&, sd::TokenId root, sd::RandomStream&, sd::DraftTree& tree,
             sd::ProbMatrix& rows) {
    tree.clear(root);
    const std::int32_t frontier[] = {sd::DraftTree::kRoot};
    drafter.propose(sd::DraftRequest{&tree, frontier}, rows);
  }
};
// Uses a member the Drafter concept does not promise, so it must not satisfy
// TreeBuilder (checked against the minimal archetype drafter).
struct BuilderNeedingMoreThanTheConcept {
  template <class D>
  void build(D& drafter, const sd::DraftBudget&, sd::TokenId, sd::RandomStream&, sd::DraftTree&, sd::ProbMatrix&)
    requires requires { drafter.hidden_states(); }
  {}
};

struct VerifierArchetype {
  void begin(std::int32_t, std::span<const sd::TokenId>) {}
  void score(std::span<const sd::ScoreItem>, std::span<sd::ProbRows>) {}
  void commit(std::int32_t, const sd::DraftTree&, const sd::VerifyResult&) {}
  void end(std::int32_t) {}
};
struct VerifierWithoutScore {
  void begin(std::int32_t, std::span<const sd::TokenId>) {}
  void commit(std::int32_t, const sd::DraftTree&, const sd::VerifyResult&) {}
  void end(std::int32_t) {}
};
struct VerifierWithoutBegin {
  void score(std::span<const sd::ScoreItem>, std::span<sd::ProbRows>) {}
  void commit(std::int32_t, const sd::DraftTree&, const sd::VerifyResult&) {}
  void end(std::int32_t) {}
};
// The single-sequence score of the first engine: one sequence per forward
// cannot batch, so it is not a Verifier any more.
struct VerifierScoringOneSequence {
  void begin(std::int32_t, std::span<const sd::TokenId>) {}
  sd::ProbRows score(std::int32_t, const sd::DraftTree&) { return {}; }
  void commit(std::int32_t, const sd::DraftTree&, const sd::VerifyResult&) {}
  void end(std::int32_t) {}
};

struct PolicyArchetype {
  sd::DraftBudget budget() { return {}; }
  void observe(const sd::RoundOutcome&) {}
};
struct PolicyWithoutObserve {
  sd::DraftBudget budget() { return {}; }
};

struct ModelArchetype {
  std::int64_t vocab_size() const { return 8; }
  std::int64_t hidden_size() const { return 4; }
  std::int64_t max_context() const { return 16; }
  void open(std::int32_t, const sd::CachePolicy&) {}
  void close(std::int32_t) {}
  void forward(const sd::ForwardRequest&) {}
  void accept(std::int32_t, std::span<const std::int32_t>) {}
  void rollback(std::int32_t, std::int64_t) {}
};
struct ModelWithoutRollback {
  std::int64_t vocab_size() const { return 8; }
  std::int64_t hidden_size() const { return 4; }
  std::int64_t max_context() const { return 16; }
  void open(std::int32_t, const sd::CachePolicy&) {}
  void close(std::int32_t) {}
  void forward(const sd::ForwardRequest&) {}
  void accept(std::int32_t, std::span<const std::int32_t>) {}
};
// No sequence lifecycle: a host cannot tell it when a sequence starts or ends.
struct ModelWithoutLifecycle {
  std::int64_t vocab_size() const { return 8; }
  std::int64_t hidden_size() const { return 4; }
  std::int64_t max_context() const { return 16; }
  void forward(const sd::ForwardRequest&) {}
  void accept(std::int32_t, std::span<const std::int32_t>) {}
  void rollback(std::int32_t, std::int64_t) {}
};

}  // namespace

static_assert(sd::AcceptanceRule<RuleArchetype>);
static_assert(!sd::AcceptanceRule<RuleWithoutLosslessTrait>);
static_assert(!sd::AcceptanceRule<RuleReturningWrongType>);
static_assert(sd::AcceptanceRule<sd::GreedyAcceptance>);
static_assert(sd::AcceptanceRule<sd::SpeculativeSampling>);
static_assert(sd::AcceptanceRule<sd::RecursiveRejectionSampling>);
static_assert(sd::AcceptanceRule<sd::TypicalAcceptance>);
static_assert(!sd::TypicalAcceptance::kLossless, "typical acceptance is lossy and must say so");

static_assert(sd::Drafter<DrafterArchetype>);
static_assert(sd::Drafter<sd::archetypes::Drafter>);
static_assert(!sd::Drafter<DrafterWithoutCommit>);

static_assert(sd::TreeBuilder<BuilderArchetype>);
static_assert(!sd::TreeBuilder<BuilderNeedingMoreThanTheConcept>);

static_assert(sd::Verifier<VerifierArchetype>);
static_assert(!sd::Verifier<VerifierWithoutScore>);
static_assert(!sd::Verifier<VerifierWithoutBegin>);
static_assert(!sd::Verifier<VerifierScoringOneSequence>);

static_assert(sd::LengthPolicy<PolicyArchetype>);
static_assert(!sd::LengthPolicy<PolicyWithoutObserve>);

static_assert(sd::Model<ModelArchetype>);
// A chain-only rule fits only a chain-only builder; tree rules fit any builder
// (the decoders static_assert this; tests/compile_fail checks the sentence).
static_assert(sd::RuleFitsBuilder<sd::ChainBuilder, sd::SpeculativeSampling>);
static_assert(!sd::RuleFitsBuilder<sd::StaticTreeBuilder, sd::SpeculativeSampling>);
static_assert(!sd::RuleFitsBuilder<sd::DynamicTreeBuilder, sd::SpeculativeSampling>);
static_assert(sd::RuleFitsBuilder<sd::StaticTreeBuilder, sd::RecursiveRejectionSampling>);
static_assert(sd::RuleFitsBuilder<sd::DynamicTreeBuilder, sd::GreedyAcceptance>);
static_assert(sd::RuleFitsBuilder<sd::ChainBuilder, sd::TypicalAcceptance>);
static_assert(!sd::Model<ModelWithoutRollback>);
static_assert(!sd::Model<ModelWithoutLifecycle>);
static_assert(sd::Model<sd::TimedModel<ModelArchetype>>);
static_assert(sd::Verifier<sd::ModelVerifier<ModelArchetype>>);
static_assert(sd::FeatureVerifier<sd::ModelVerifier<ModelArchetype>>);
static_assert(sd::Drafter<sd::ModelDrafter<ModelArchetype>>);
static_assert(!sd::FeatureDrafter<sd::ModelDrafter<ModelArchetype>>);

TEST_CASE("Component archetypes satisfy their concepts and near-misses do not", "[unit][concepts]") {
  // The checks are the static_asserts above; this case makes the file a test.
  CHECK(sd::AcceptanceRule<RuleArchetype>);
  CHECK_FALSE(sd::Model<ModelWithoutRollback>);
}
