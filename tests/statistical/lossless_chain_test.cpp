// Speculative sampling on chains is lossless: the first emitted token and the
// first two emitted tokens follow the warped target, for sampled and for
// deterministic drafts, at every warp setting and hand-made p/q pair. A rule
// with the acceptance ratio inverted, min(1, q/p), fails the same test.
#include "lossless_harness.hpp"
#include "specdec/accept/row_math.hpp"
#include "specdec/accept/speculative_sampling.hpp"
#include "support/catch.hpp"

namespace sd = specdec;
namespace st = specdec::testing;

namespace {

void check_all(st::Strategy strategy) {
  sd::SpeculativeSampling rule;
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

// The classic mistake: accept with min(1, q(x)/p(x)) instead of min(1, p/q).
struct InvertedRatioRule {
  sd::VerifyResult operator()(const sd::DraftTree& tree, const sd::ProbRows& target, const sd::ProbRows& draft,
                              sd::RandomStream& rng) const {
    sd::VerifyResult r;
    std::int32_t i = 0;
    for (; i < tree.size(); ++i) {
      const auto p = target.row(i), q = draft.row(tree.children_draft_row(i - 1));
      const auto x = static_cast<std::size_t>(tree.token(i));
      if (!(rng.uniform() * p[x] < q[x])) break;
      r.accepted_nodes.push_back(i);
    }
    const double u = rng.uniform();
    if (i < tree.size()) {
      const auto p = target.row(i), q = draft.row(tree.children_draft_row(i - 1));
      r.bonus_token = sd::row_math::sample_residual(p.data(), q.data(), tree.token(i), target.vocab(), u);
    } else {
      r.bonus_token = sd::row_math::sample_row(target.row(i).data(), target.vocab(), u);
    }
    return r;
  }
};

}  // namespace

TEST_CASE("Speculative sampling on sampled chains is lossless", "[statistical][accept]") {
  check_all(st::Strategy::kChainSampled);
}

TEST_CASE("Speculative sampling on greedy-drafted chains is lossless", "[statistical][accept]") {
  check_all(st::Strategy::kChainGreedyDraft);
}

TEST_CASE("The losslessness test rejects a rule with the acceptance ratio inverted", "[statistical][accept]") {
  const auto c = st::pair_cases()[0];
  const auto fit = st::run_lossless_check(c, st::warp_settings()[0], st::Strategy::kChainSampled,
                                          InvertedRatioRule{});
  INFO("first token: " << fit.first.describe());
  INFO("first two tokens: " << fit.joint.describe());
  CHECK(fit.first.rejects(st::kAlpha));
  CHECK(fit.joint.rejects(st::kAlpha));
}
