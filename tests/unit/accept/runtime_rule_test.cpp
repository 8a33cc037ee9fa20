// RuntimeRule (accept/runtime_rule.hpp): a rule chosen at run time verifies
// exactly as the rule it holds, from the same draws, and says what that
// rule's type says.
#include <concepts>
#include <cstdint>
#include <exception>
#include <optional>
#include <random>
#include <string>
#include <typeinfo>

#include "specdec/accept/runtime_rule.hpp"
#include "support/catch.hpp"
#include "support/random_tree.hpp"

namespace sd = specdec;

namespace {

// Two calls on the same tree and rows from equal streams: the same result,
// the same exception type or none, and the streams at the same offset.
template <class Rule, bool kChains, bool kProbs>
void check_same(Rule rule, int trees) {
  constexpr std::int64_t kVocab = 5;
  sd::RuntimeRule<kChains, kProbs> chosen(rule);
  std::mt19937 gen(23);
  int differs = 0, threw = 0;
  std::int64_t accepted = 0;
  for (int i = 0; i < trees; ++i) {
    const auto t = sd::testing::random_tree(gen, kVocab, 8, kChains);
    const sd::ProbRows target(t.target_rows.data(), t.tree.size() + 1, kVocab);
    sd::RandomStream a(7, static_cast<std::uint64_t>(i)), b(7, static_cast<std::uint64_t>(i));
    std::optional<sd::VerifyResult> expected, got;
    std::string expected_error, got_error;
    try {
      expected = rule.verify(t.tree, target, t.draft_matrix.view(), a);
    } catch (const std::exception& e) {
      expected_error = typeid(e).name();
    }
    try {
      got = chosen.verify(t.tree, target, t.draft_matrix.view(), b);
    } catch (const std::exception& e) {
      got_error = typeid(e).name();
    }
    threw += expected ? 0 : 1;
    if (expected_error != got_error || expected.has_value() != got.has_value() || a.offset() != b.offset()) {
      ++differs;
      continue;
    }
    if (!expected) continue;
    accepted += static_cast<std::int64_t>(expected->accepted_nodes.size());
    if (expected->accepted_nodes != got->accepted_nodes || expected->bonus_token != got->bonus_token ||
        expected->depth_accepted != got->depth_accepted)
      ++differs;
  }
  INFO(Rule::kName);
  CHECK(differs == 0);
  CHECK(threw < trees / 10);   // the trees exercised the rule, not its input checks
  CHECK(accepted > trees / 4);  // and drafts were accepted
}

}  // namespace

TEST_CASE("A rule chosen at run time emits what the rule it holds emits, from the same draws", "[unit][accept]") {
  check_same<sd::GreedyAcceptance, false, false>(sd::GreedyAcceptance{}, 1500);
  check_same<sd::RecursiveRejectionSampling, false, true>(sd::RecursiveRejectionSampling{}, 1500);
  check_same<sd::TraversalVerification, false, false>(sd::TraversalVerification{}, 1500);
  check_same<sd::TypicalAcceptance, false, false>(sd::TypicalAcceptance{}, 1500);
  check_same<sd::BlockVerification, true, false>(sd::BlockVerification{}, 1500);
  check_same<sd::SpeculativeSampling, true, true>(sd::SpeculativeSampling{}, 1500);
}

TEST_CASE("A rule chosen at run time says what the held rule's type says", "[unit][accept]") {
  using Tree = sd::RuntimeRule<false, true>;
  using Chain = sd::RuntimeRule<true, false>;
  using ChainProbs = sd::RuntimeRule<true, true>;
  static_assert(sd::AcceptanceRule<Tree> && sd::AcceptanceRule<Chain> && sd::AcceptanceRule<ChainProbs>);
  // The chain rules are among the choices only with kChains, and the type
  // says so (the engine's static pairing checks read it).
  static_assert(!std::constructible_from<Tree, sd::BlockVerification>);
  static_assert(!std::constructible_from<Chain, sd::SpeculativeSampling>);
  static_assert(std::constructible_from<ChainProbs, sd::SpeculativeSampling>);
  static_assert(!Tree::kChainOnly && Chain::kChainOnly && ChainProbs::kChainOnly);
  static_assert(!Tree::kNeedsDraftProbs && !Chain::kNeedsDraftProbs && ChainProbs::kNeedsDraftProbs);

  const Tree greedy(sd::GreedyAcceptance{}), rrs(sd::RecursiveRejectionSampling{}),
      typical(sd::TypicalAcceptance{});
  CHECK(sd::rule_lossless(greedy));
  CHECK(sd::rule_greedy_only(greedy));
  CHECK(std::string(sd::rule_name(greedy)) == sd::GreedyAcceptance::kName);
  CHECK(sd::rule_lossless(rrs));
  CHECK_FALSE(sd::rule_greedy_only(rrs));
  CHECK(std::string(sd::rule_name(rrs)) == sd::RecursiveRejectionSampling::kName);
  CHECK_FALSE(sd::rule_lossless(typical));  // LOSSY, recorded so
  CHECK_FALSE(sd::rule_greedy_only(typical));
  const ChainProbs block(sd::BlockVerification{}), speculative(sd::SpeculativeSampling{});
  CHECK(std::string(sd::rule_name(block)) == sd::BlockVerification::kName);
  CHECK(std::string(sd::rule_name(speculative)) == sd::SpeculativeSampling::kName);
  // The rules' own types answer the same questions from their constants.
  CHECK(sd::rule_greedy_only(sd::GreedyAcceptance{}));
  CHECK_FALSE(sd::rule_lossless(sd::TypicalAcceptance{}));
}
