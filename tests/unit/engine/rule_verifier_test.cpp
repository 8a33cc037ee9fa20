// A verifier that runs the acceptance rule itself (RuleVerifier, the shape
// of cuda::DeviceVerifier) takes the engine's accept step: the engine hands
// it each request's draft rows and rule stream, uses its outcomes, and never
// calls the rule. Run here with a host stand-in, every request must emit
// exactly what it emits through the ordinary score-then-rule path, in mixed
// greedy and sampled batches, over chains and trees.
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <vector>

#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/concepts.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/tree/dynamic_tree_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "support/catch.hpp"
#include "specdec/testing/hashed_context_model.hpp"

namespace sd = specdec;
using sd::testing::HashedContextModel;

namespace {

constexpr std::int64_t kVocab = 20;
using Drafter = sd::ModelDrafter<HashedContextModel>;

// ModelVerifier plus verify_round: the score, then the rule, in one call.
class HostRuleVerifier {
 public:
  explicit HostRuleVerifier(HashedContextModel& model) : inner_(model) {}
  std::int64_t max_context() const { return inner_.max_context(); }
  void begin(std::int32_t seq, std::span<const sd::TokenId> prompt) { inner_.begin(seq, prompt); }
  void score(std::span<const sd::ScoreItem> items, std::span<sd::ProbRows> out) {
    ++scores;
    inner_.score(items, out);
  }
  template <class R>
  void verify_round(R& rule, std::span<const sd::ScoreItem> items, std::span<const sd::ProbRows> draft_rows,
                    std::span<sd::RandomStream* const> rngs, std::span<sd::VerifyResult> out) {
    ++rounds;
    REQUIRE(draft_rows.size() == items.size());
    REQUIRE(rngs.size() == items.size());
    REQUIRE(out.size() == items.size());
    rows_.resize(items.size());
    inner_.score(items, rows_);
    for (std::size_t i = 0; i < items.size(); ++i)
      out[i] = rule.verify(*items[i].tree, rows_[i], draft_rows[i], *rngs[i]);
  }
  void commit(std::int32_t seq, const sd::DraftTree& tree, const sd::VerifyResult& result) {
    inner_.commit(seq, tree, result);
  }
  void end(std::int32_t seq) { inner_.end(seq); }

  int scores = 0, rounds = 0;

 private:
  sd::ModelVerifier<HashedContextModel> inner_;
  std::vector<sd::ProbRows> rows_;
};

static_assert(sd::RuleVerifier<HostRuleVerifier, sd::RecursiveRejectionSampling>);
static_assert(!sd::RuleVerifier<sd::ModelVerifier<HashedContextModel>, sd::RecursiveRejectionSampling>);

// Request i: greedy for i % 3 == 0, else sampled two ways; each its own seed.
sd::GenerationOptions options_of(std::int32_t i) {
  sd::GenerationOptions o;
  o.max_new_tokens = 10 + 3 * i;
  o.request_id = static_cast<std::uint64_t>(60 + i);
  if (i % 3 == 1) o.sampling = sd::SamplingParams{0.8f, 8, 1.0f};
  if (i % 3 == 2) o.sampling = sd::SamplingParams{1.0f, 0, 0.9f};
  o.sampling.seed = static_cast<std::uint64_t>(3 + i);
  return o;
}

struct Run {
  std::map<std::int32_t, std::vector<sd::TokenId>> tokens;
  std::int64_t rounds = 0;
  int verifier_scores = 0, verifier_rounds = 0, observed_empty_rows = 0;
};

// Six requests in one engine, all in each step, through verifier V.
template <class V, class Builder>
Run run(Builder builder, sd::DraftBudget budget) {
  using Engine = sd::SpeculativeEngine<Drafter, Builder, V, sd::RecursiveRejectionSampling, sd::FixedLength>;
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, /*noise=*/0.7f);
  V verifier(target);
  Engine engine(std::move(builder), verifier, sd::RecursiveRejectionSampling{});
  Run out;
  engine.set_round_view_observer(
      [&](const sd::RoundView& v) { out.observed_empty_rows += v.target.num_rows() == 0; });
  std::deque<Drafter> drafters;
  std::deque<sd::FixedLength> policies;
  std::deque<typename Engine::Request> requests;
  for (std::int32_t i = 0; i < 6; ++i) {
    drafters.emplace_back(draft, i);
    policies.emplace_back(budget);
    requests.emplace_back(i, drafters.back(), policies.back(), options_of(i));
    engine.begin(requests.back(), sd::testing::request_prompt(i, kVocab));
  }
  for (;;) {
    std::vector<typename Engine::Request*> batch;
    for (auto& r : requests)
      if (r.active()) batch.push_back(&r);
    if (batch.empty()) break;
    engine.step(batch);
  }
  for (auto& r : requests) {
    out.tokens[r.seq()] = r.result().tokens;
    out.rounds += r.result().stats.rounds();
  }
  if constexpr (requires { verifier.rounds; }) {
    out.verifier_scores = verifier.scores;
    out.verifier_rounds = verifier.rounds;
  }
  return out;
}

template <class Builder>
void check_same(Builder builder, sd::DraftBudget budget) {
  const Run plain = run<sd::ModelVerifier<HashedContextModel>>(builder, budget);
  const Run fused = run<HostRuleVerifier>(builder, budget);
  CHECK(fused.tokens == plain.tokens);
  CHECK(fused.rounds == plain.rounds);
  CHECK(fused.verifier_scores == 0);  // the engine never asked for rows
  CHECK(fused.verifier_rounds > 0);
  CHECK(fused.observed_empty_rows == fused.rounds);  // observers see no host rows
  CHECK(plain.observed_empty_rows == 0);
  // Drafts were accepted: fewer rounds than tokens.
  std::int64_t tokens = 0;
  for (const auto& [seq, t] : plain.tokens) tokens += static_cast<std::int64_t>(t.size());
  CHECK(plain.rounds < tokens);
}

}  // namespace

TEST_CASE("A verifier that runs the rule itself gives every request its own tokens, chains",
          "[unit][engine]") {
  check_same(sd::ChainBuilder{}, sd::FixedLength::chain(3).budget());
}

TEST_CASE("A verifier that runs the rule itself gives every request its own tokens, trees",
          "[unit][engine]") {
  check_same(sd::DynamicTreeBuilder{3, 3, 8}, sd::DraftBudget{3, 8, 8, 0.0f});
}
