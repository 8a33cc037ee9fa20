// Recursive rejection sampling over token trees is lossless for every way a
// tree's children can be drafted (i.i.d., without replacement, deterministic
// top-k) and for trees made by pruning and by trie union; checked on the first
// and first two emitted tokens at every warp setting and p/q pair. A tree rule
// that forgets to remove rejected deterministic children from the residual
// fails the same test, and so does MSS kept on pruned slots that happened to
// keep all their children (the choice of rule then depends on the draws). A
// sampled StaticTreeBuilder tree with an early stop, pruned to a budget, is
// checked through the real builder.
#include "lossless_harness.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/accept/row_math.hpp"
#include "specdec/tree/static_tree_builder.hpp"
#include "support/catch.hpp"
#include "unit/tree/table_drafter.hpp"

namespace sd = specdec;
namespace st = specdec::testing;

namespace {

void check_all(st::Strategy strategy) {
  sd::RecursiveRejectionSampling rule;
  for (const auto& c : st::pair_cases())
    for (const auto& params : st::warp_settings()) {
      const auto fit = st::run_lossless_check(c, params, strategy,
                                              [&](auto&&... args) { return rule.verify(args...); });
      INFO(st::name(strategy) << ", " << c.name << ", " << st::describe(params));
      INFO("first token: " << fit.first.describe());
      INFO("first two tokens: " << fit.joint.describe());
      CHECK_FALSE(fit.first.rejects(st::kAlpha));
      CHECK_FALSE(fit.joint.rejects(st::kAlpha));
    }
}

// Target-only rule with the bug: after every child is rejected it emits from
// P itself, not from P without the rejected children.
struct ResidualForgettingRule {
  sd::VerifyResult operator()(const sd::DraftTree& tree, const sd::ProbRows& target, const sd::ProbRows&,
                              sd::RandomStream& rng) const {
    sd::VerifyResult r;
    std::int32_t slot = sd::DraftTree::kRoot;
    while (true) {
      const auto p = target.row(slot + 1);
      std::int32_t next = -1;
      double mass = 1.0;
      for (auto c = tree.first_child(slot); c >= 0 && next < 0; c = tree.next_sibling(c)) {
        const double p_x = p[static_cast<std::size_t>(tree.token(c))];
        if (rng.uniform() * mass < p_x) next = c;
        else mass -= p_x;
      }
      if (next < 0) {
        r.bonus_token = sd::row_math::sample_row(p.data(), target.vocab(), rng.uniform());
        return r;
      }
      r.accepted_nodes.push_back(next);
      slot = next;
    }
  }
};

}  // namespace

TEST_CASE("Recursive rejection sampling is lossless on sampled chains", "[statistical][accept][tree]") {
  check_all(st::Strategy::kChainSampled);
}

TEST_CASE("Recursive rejection sampling is lossless on i.i.d. sampled trees", "[statistical][accept][tree]") {
  check_all(st::Strategy::kTreeIid);
}

TEST_CASE("Recursive rejection sampling is lossless on trees sampled without replacement",
          "[statistical][accept][tree]") {
  check_all(st::Strategy::kTreeNoReplacement);
}

TEST_CASE("Recursive rejection sampling is lossless on deterministic top-k trees", "[statistical][accept][tree]") {
  check_all(st::Strategy::kTreeTopK);
}

TEST_CASE("Recursive rejection sampling is lossless on pruned trees", "[statistical][accept][tree]") {
  check_all(st::Strategy::kTreePruned);
}

TEST_CASE("Recursive rejection sampling is lossless on trie unions of trees", "[statistical][accept][tree]") {
  check_all(st::Strategy::kTreeUnion);
}

TEST_CASE("The losslessness test rejects a tree rule that forgets rejected children", "[statistical][accept][tree]") {
  const auto c = st::pair_cases()[0];
  const auto fit = st::run_lossless_check(c, st::warp_settings()[0], st::Strategy::kTreeTopK,
                                          ResidualForgettingRule{});
  INFO("first token: " << fit.first.describe());
  INFO("first two tokens: " << fit.joint.describe());
  CHECK(fit.first.rejects(st::kAlpha));
  CHECK(fit.joint.rejects(st::kAlpha));
}

TEST_CASE("The losslessness test rejects MSS on pruned slots chosen by their draws", "[statistical][accept][tree]") {
  sd::RecursiveRejectionSampling rule;
  const auto c = st::pair_cases()[0];
  const auto fit = st::run_lossless_check(c, st::warp_settings()[0], st::Strategy::kTreePrunedKeepingModes,
                                          [&](auto&&... args) { return rule.verify(args...); });
  INFO("first token: " << fit.first.describe());
  INFO("first two tokens: " << fit.joint.describe());
  CHECK(fit.first.rejects(st::kAlpha));
  CHECK(fit.joint.rejects(st::kAlpha));
}

namespace {

// The reproduction of a lossless bug in prune_to_budget (arXiv 2305.09781
// §4.3's multi-step speculative sampling needs the slot's mode to be fixed
// before the draws): StaticTreeBuilder draws children without replacement,
// stops expanding below draft probability 0.3, so the tree's size depends on
// the draws; pruned to 2 nodes, the old prune kept MSS exactly when nothing
// was cut. `old_prune` emulates that for the power check.
st::ChiSquareResult first_token_fit_of_pruned_static_tree(bool old_prune) {
  constexpr std::int64_t kV = 4;
  const std::vector<float> p = {0.05f, 0.05f, 0.45f, 0.45f};
  st::TableDrafter drafter(kV, [](sd::TokenId, std::int32_t depth) {
    if (depth == 0) return std::vector<float>{0.45f, 0.45f, 0.05f, 0.05f};
    return std::vector<float>{0.25f, 0.25f, 0.25f, 0.25f};
  });
  // Two root children; the first is expanded only when its q >= 0.3.
  sd::StaticTreeBuilder builder(sd::parse_tree_shape("0;1;0.0"), sd::ChildMode::kSampledWithoutReplacement);
  sd::RecursiveRejectionSampling rule;
  sd::RandomStream draft_rng(5, 1), rule_rng(5, 2);
  sd::DraftTree full, tree;
  sd::ProbMatrix rows;
  std::vector<float> target;
  std::vector<std::int64_t> counts(kV, 0);
  const std::int64_t n = st::outcomes();
  for (std::int64_t i = 0; i < n; ++i) {
    builder.build(drafter, sd::DraftBudget{2, 3, 3, 0.3f}, /*root=*/0, draft_rng, full, rows);
    tree = old_prune && full.size() <= 2 ? full : sd::prune_to_budget(full, 2).tree;
    target.clear();
    for (std::int32_t r = 0; r <= tree.size(); ++r) target.insert(target.end(), p.begin(), p.end());
    const auto result = rule.verify(tree, sd::ProbRows(target.data(), tree.size() + 1, kV), rows.view(), rule_rng);
    const auto first = result.accepted_nodes.empty() ? result.bonus_token : tree.token(result.accepted_nodes[0]);
    ++counts[static_cast<std::size_t>(first)];
  }
  return st::chi_square_gof(counts, std::vector<double>(p.begin(), p.end()));
}

}  // namespace

TEST_CASE("A sampled static tree with an early stop, pruned to a budget, stays lossless", "[statistical][accept][tree]") {
  const auto fit = first_token_fit_of_pruned_static_tree(/*old_prune=*/false);
  INFO(fit.describe());
  CHECK_FALSE(fit.rejects(st::kAlpha));
}

TEST_CASE("The same test rejects the old prune, which kept MSS when the draws left nothing to cut",
          "[statistical][accept][tree]") {
  const auto fit = first_token_fit_of_pruned_static_tree(/*old_prune=*/true);
  INFO(fit.describe());
  CHECK(fit.rejects(st::kAlpha));
}
