// Block verification (arXiv 2403.10444, Algorithm 2) and traversal
// verification (arXiv 2505.12398) are lossless: the joint law of the first
// three emitted tokens follows the warped target, for chains of 1 to 6
// sampled or greedy drafts and for trees of every supported child mode, at
// temperature 1 and at one warped setting, on every hand-made p/q pair.
//
// The must-fail variant is the mistake one vendor shipped first: after the
// block ends at tau, resample from the ordinary residual norm(max(M_b - M_s, 0))
// instead of norm(max(p_tau M_b - M_s, 0)) (on trees: every rejected child
// moves its parent's law to the ordinary residual). The same test rejects it
// on chains and on trees, at every chain length tried (power check).
//
// At temperature 0 (one-hot target rows) both rules emit exactly what greedy
// verification emits, and traversal verification equals a plainly recursive
// reference implementation token for token, from the same uniforms.
#include <algorithm>
#include <cmath>
#include <vector>

#include "lossless_harness.hpp"
#include "specdec/accept/block_verification.hpp"
#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/accept/sequence_row_math.hpp"
#include "specdec/accept/traversal_verification.hpp"
#include "support/catch.hpp"

namespace sd = specdec;
namespace st = specdec::testing;

namespace {

// Traversal verification written as a recursion over the tree, for the
// reference check and, with `ordinary_residual`, the vendor's bug.
class ReferenceTraversal {
 public:
  explicit ReferenceTraversal(bool ordinary_residual) : ordinary_residual_(ordinary_residual) {}

  sd::VerifyResult operator()(const sd::DraftTree& tree, const sd::ProbRows& target,
                              const sd::ProbRows& draft, sd::RandomStream& rng) {
    tree_ = &tree;
    target_ = &target;
    draft_ = &draft;
    u_ = rng.take(static_cast<std::uint64_t>(tree.size()) + 1);
    path_.clear();
    sd::VerifyResult r;
    visit(sd::DraftTree::kRoot, 1.0, r);
    r.accepted_nodes.assign(path_.rbegin(), path_.rend());
    return r;
  }

 private:
  // Does `slot`, reached with weight p, hold? If so it sets r.bonus_token,
  // and path_ collects the path bottom-up. A sampled slot's b is w / total
  // (w the row until a rejection); a one-hot slot's is the row without the
  // rejected tokens `gone`, over total (the library's O(1) form).
  bool visit(std::int32_t slot, double p, sd::VerifyResult& r) {
    const auto vocab = target_->vocab();
    const auto row = target_->row(slot + 1);
    const auto mode = tree_->children_mode(slot);
    const bool one_hot = tree_->num_children(slot) == 0 || mode == sd::ChildMode::kDeterministic;
    std::vector<double> w(row.begin(), row.end());
    double total = 1.0, remaining = -1.0;
    bool residual = false;
    std::vector<sd::TokenId> gone;
    std::vector<double> s;
    double s_total = 1.0;
    if (!one_hot) {
      const auto q = draft_->row(tree_->children_draft_row(slot));
      s.assign(q.begin(), q.end());
    }
    const auto b_of = [&](std::size_t y) {
      if (residual) return w[y] / total;
      if (std::find(gone.begin(), gone.end(), static_cast<sd::TokenId>(y)) != gone.end()) return 0.0;
      return static_cast<double>(row[y]) / total;
    };
    for (const auto c : tree_->children(slot)) {
      const auto x = static_cast<std::size_t>(tree_->token(c));
      const double p_c = sd::row_math::child_weight(p, b_of(x), one_hot ? 1.0 : s[x] / s_total);
      if (p_c > 0.0 && visit(c, p_c, r)) {
        path_.push_back(c);
        return true;
      }
      if (one_hot) {            // b loses x
        if (remaining < 0.0) {  // the row's exact mass, once
          remaining = 0.0;
          for (const float v : row) remaining += static_cast<double>(v);
        }
        const double b_x = b_of(x) > 0.0 ? static_cast<double>(row[x]) : 0.0;
        const double z = sd::row_math::onehot_residual_mass(p, remaining, b_x, total);
        if (z > 0.0) {
          remaining -= b_x;
          total = remaining;
          gone.push_back(static_cast<sd::TokenId>(x));
        }
        p = sd::row_math::weight_after_rejection(p, z);
        continue;
      }
      std::vector<double> next(w.size());
      double z = 0.0;
      for (std::size_t y = 0; y < w.size(); ++y) {
        next[y] = sd::row_math::residual_weight(p, b_of(y), s[y] / s_total);
        z += next[y];
      }
      if (ordinary_residual_)  // the bug: the law moves to max(b - s, 0), unscaled
        for (std::size_t y = 0; y < w.size(); ++y)
          next[y] = sd::row_math::residual_weight(1.0, b_of(y), s[y] / s_total);
      if (z > 0.0) {
        double t = 0.0;
        for (const double v : next) t += v;
        w = next;
        total = ordinary_residual_ ? t : z;
        residual = true;
      }
      p = sd::row_math::weight_after_rejection(p, z);
      if (mode == sd::ChildMode::kSampledWithoutReplacement) {
        double rest = 0.0;
        for (std::size_t y = 0; y < s.size(); ++y) {
          s[y] = y == x ? 0.0 : s[y] / s_total;
          rest += s[y];
        }
        s_total = rest;
      }
    }
    if (slot != sd::DraftTree::kRoot && !(u_[static_cast<std::uint64_t>(slot)] < p)) return false;
    const double u = u_[static_cast<std::uint64_t>(tree_->size())];
    sd::TokenId y = sd::kNoToken;
    if (residual) {
      y = sd::row_math::sample_row(w.data(), vocab, u);
    } else if (!gone.empty()) {
      y = sd::row_math::sample_excluding(row.data(), vocab, u, [&](std::int64_t k) {
        std::int64_t next = vocab;
        for (const auto t : gone)
          if (t > k && t < next) next = t;
        return next;
      });
    }
    if (y == sd::kNoToken) y = sd::row_math::sample_row(row.data(), vocab, u);
    r.bonus_token = y;
    return true;
  }

  bool ordinary_residual_;
  const sd::DraftTree* tree_ = nullptr;
  const sd::ProbRows* target_ = nullptr;
  const sd::ProbRows* draft_ = nullptr;
  sd::PhiloxUniforms u_{};
  std::vector<std::int32_t> path_;
};

// T = 1 and one warped setting.
std::vector<sd::SamplingParams> settings() {
  return {st::warp_settings()[0], st::warp_settings()[1]};
}

auto chain_of(int gamma, sd::ChildMode mode) {
  return [=](st::Drafting& d, std::vector<sd::TokenId>& ctx, sd::DraftTree& tree, sd::ProbMatrix& rows) {
    d.chain(ctx, gamma, mode, tree, rows);
  };
}
auto strategy(st::Strategy s) {
  return [=](st::Drafting& d, std::vector<sd::TokenId>& ctx, sd::DraftTree& tree, sd::ProbMatrix& rows) {
    d.draft(s, ctx, tree, rows);
  };
}

template <class Draft, class Rule>
void check_lossless(const std::string& what, Draft draft, Rule& rule) {
  for (const auto& c : st::pair_cases())
    for (const auto& params : settings()) {
      const auto fit = st::run_lossless_fit(
          c, params, draft, [&](auto&&... args) { return rule.verify(args...); }, 3);
      INFO(what << ", " << c.name << ", " << st::describe(params));
      INFO("first token: " << fit.first.describe());
      INFO("first two tokens: " << fit.joint.describe());
      INFO("first three tokens: " << fit.triple.describe());
      CHECK_FALSE(fit.first.rejects(st::kAlpha));
      CHECK_FALSE(fit.joint.rejects(st::kAlpha));
      CHECK_FALSE(fit.triple.rejects(st::kAlpha));
    }
}

}  // namespace

TEST_CASE("Block verification is lossless on sampled chains of 1 to 6 drafts", "[statistical][accept]") {
  const int gamma = GENERATE(1, 2, 3, 4, 5, 6);
  sd::BlockVerification rule;
  check_lossless("sampled chain, gamma " + std::to_string(gamma),
                 chain_of(gamma, sd::ChildMode::kSampledWithReplacement), rule);
}

TEST_CASE("Block verification is lossless on greedy-drafted (one-hot) chains of 1 to 6 drafts",
          "[statistical][accept]") {
  const int gamma = GENERATE(1, 2, 3, 4, 5, 6);
  sd::BlockVerification rule;
  check_lossless("greedy-drafted chain, gamma " + std::to_string(gamma),
                 chain_of(gamma, sd::ChildMode::kDeterministic), rule);
}

TEST_CASE("Traversal verification is lossless on chains and on trees of every child mode",
          "[statistical][accept][tree]") {
  const auto s =
      GENERATE(st::Strategy::kChainSampled, st::Strategy::kTreeIid, st::Strategy::kTreeNoReplacement,
               st::Strategy::kTreeTopK, st::Strategy::kTreePruned, st::Strategy::kTreeUnion);
  sd::TraversalVerification rule;
  check_lossless(st::name(s), strategy(s), rule);
}

// The bug shows where a block ends at a node with p_tau < 1 and the two
// residuals differ: p and q close but not equal (the near-zero pair). For
// one-hot drafts both residuals are p without the drafted token, so it hides
// there. Power: rejected at every chain length, with a quarter of the draws
// (what the sanitizer pass uses) already far past alpha.
TEST_CASE("The three-token test rejects block verification resampling from the ordinary residual (power)",
          "[statistical][accept]") {
  const int gamma = GENERATE(2, 3, 4, 6);
  ReferenceTraversal bug(/*ordinary_residual=*/true);
  const auto fit = st::run_lossless_fit(st::pair_cases()[2], settings()[0],
                                        chain_of(gamma, sd::ChildMode::kSampledWithReplacement), bug, 3);
  INFO("gamma " << gamma << ", first two tokens: " << fit.joint.describe());
  INFO("first three tokens: " << fit.triple.describe());
  CHECK(fit.joint.rejects(st::kAlpha));
  CHECK(fit.triple.rejects(st::kAlpha));
}

TEST_CASE("The three-token test rejects traversal verification with the ordinary residual on trees (power)",
          "[statistical][accept][tree]") {
  const auto s = GENERATE(st::Strategy::kTreeIid, st::Strategy::kTreeNoReplacement);
  ReferenceTraversal bug(/*ordinary_residual=*/true);
  const auto fit = st::run_lossless_fit(st::pair_cases()[2], settings()[0], strategy(s), bug, 3);
  INFO(st::name(s) << ", first two tokens: " << fit.joint.describe());
  INFO("first three tokens: " << fit.triple.describe());
  CHECK(fit.joint.rejects(st::kAlpha));
  CHECK(fit.triple.rejects(st::kAlpha));
}

namespace {

// Rounds on random short contexts: drafts from the T = 1 pair, target rows
// from `target_params`; calls check(tree, target, draft) for each.
template <class Check>
void for_random_rounds(const sd::SamplingParams& target_params, st::Strategy s, int rounds, Check&& check) {
  for (const auto& c : st::pair_cases()) {
    st::SyntheticPair draft_pair(c, st::warp_settings()[0], 7), target_pair(c, target_params, 7);
    st::Drafting drafting(draft_pair, 7);
    std::mt19937 gen(3);
    sd::DraftTree tree;
    sd::ProbMatrix draft_rows, target_rows;
    for (int i = 0; i < rounds; ++i) {
      std::vector<sd::TokenId> ctx(static_cast<std::size_t>(gen() % 3));
      for (auto& t : ctx) t = static_cast<sd::TokenId>(gen() % st::kVocab);
      drafting.draft(s, ctx, tree, draft_rows);
      target_rows.resize(tree.size() + 1, st::kVocab);
      const auto base = ctx.size();
      for (std::int32_t slot = sd::DraftTree::kRoot; slot < tree.size(); ++slot) {
        if (slot != sd::DraftTree::kRoot)
          for (auto n : tree.path_to(slot)) ctx.push_back(tree.token(n));
        const auto p = target_pair.target(ctx);
        std::copy(p.begin(), p.end(), target_rows.row(slot + 1).begin());
        ctx.resize(base);
      }
      check(tree, target_rows.view(), draft_rows.view());
    }
  }
}

void check_same(const sd::VerifyResult& a, const sd::VerifyResult& b) {
  CHECK(a.accepted_nodes == b.accepted_nodes);
  CHECK(a.bonus_token == b.bonus_token);
}

}  // namespace

TEST_CASE("At temperature 0 block and traversal verification emit exactly what greedy verification emits",
          "[statistical][accept][tree]") {
  const auto s =
      GENERATE(st::Strategy::kChainSampled, st::Strategy::kChainGreedyDraft, st::Strategy::kTreeIid,
               st::Strategy::kTreeNoReplacement, st::Strategy::kTreeTopK, st::Strategy::kTreeUnion);
  INFO(st::name(s));
  sd::GreedyAcceptance greedy;
  sd::BlockVerification block;
  sd::TraversalVerification traversal;
  sd::RandomStream rng(1, 2);
  std::int64_t accepted = 0, rounds = 0;
  for_random_rounds(sd::SamplingParams{0.0f, 0, 1.0f, 0}, s, 500,
                    [&](const sd::DraftTree& tree, const sd::ProbRows& target, const sd::ProbRows& draft) {
                      const auto expected = greedy.verify(tree, target, draft, rng);
                      check_same(traversal.verify(tree, target, draft, rng), expected);
                      if (tree.is_chain()) check_same(block.verify(tree, target, draft, rng), expected);
                      accepted += expected.num_accepted();
                      ++rounds;
                    });
  CHECK(accepted > rounds / 4);  // drafts were accepted, not only rejected
}

TEST_CASE("Traversal verification equals block verification on chains and the recursive reference on trees",
          "[statistical][accept][tree]") {
  const auto s = GENERATE(st::Strategy::kChainSampled, st::Strategy::kChainGreedyDraft,
                          st::Strategy::kTreeIid, st::Strategy::kTreeNoReplacement, st::Strategy::kTreeTopK,
                          st::Strategy::kTreePruned, st::Strategy::kTreeUnion);
  const auto params = settings()[static_cast<std::size_t>(GENERATE(0, 1))];
  INFO(st::name(s) << ", " << st::describe(params));
  sd::BlockVerification block;
  sd::TraversalVerification traversal;
  ReferenceTraversal reference(/*ordinary_residual=*/false);
  std::uint64_t stream = 0;
  std::int64_t accepted = 0, rejected = 0;
  for_random_rounds(
      params, s, 500, [&](const sd::DraftTree& tree, const sd::ProbRows& target, const sd::ProbRows& draft) {
        sd::RandomStream a(9, stream), b(9, stream);
        ++stream;
        const auto r = traversal.verify(tree, target, draft, a);
        check_same(
            r, tree.is_chain() ? block.verify(tree, target, draft, b) : reference(tree, target, draft, b));
        accepted += r.num_accepted();
        rejected += !r.depth_accepted.empty() && r.depth_accepted.back() == 0;
      });
  CHECK(accepted > 0);
  CHECK(rejected > 0);
}

namespace {

// Mean and standard error of the per-round difference in accepted drafts,
// rule a minus rule b, on the same rounds (each from its own stream).
struct Paired {
  double mean = 0.0, se = 0.0;
};
template <class A, class B>
Paired paired_difference(st::Strategy s, A& a, B& b, int rounds_per_case) {
  std::vector<double> d;
  std::uint64_t round = 0;
  for_random_rounds(st::warp_settings()[0], s, rounds_per_case,
                    [&](const sd::DraftTree& tree, const sd::ProbRows& target, const sd::ProbRows& draft) {
                      sd::RandomStream ra(21, round), rb(22, round);
                      ++round;
                      d.push_back(a.verify(tree, target, draft, ra).num_accepted() -
                                  b.verify(tree, target, draft, rb).num_accepted());
                    });
  Paired p;
  for (const double x : d) p.mean += x;
  p.mean /= static_cast<double>(d.size());
  double var = 0.0;
  for (const double x : d) var += (x - p.mean) * (x - p.mean);
  p.se = std::sqrt(var / static_cast<double>(d.size() - 1) / static_cast<double>(d.size()));
  return p;
}

}  // namespace

TEST_CASE("On deterministic drafts block and traversal verification accept exactly as much as token level",
          "[statistical][accept][tree]") {
  // A lossless rule accepts a node at most with the target's probability of
  // its path, and token level attains that on one-hot drafts (docs/acceptance.md).
  const auto s = GENERATE(st::Strategy::kChainGreedyDraft, st::Strategy::kTreeTopK);
  INFO(st::name(s));
  sd::RecursiveRejectionSampling token;
  sd::TraversalVerification traversal;
  const auto p = paired_difference(s, traversal, token, static_cast<int>(st::outcomes() / 8));
  INFO("traversal - token level: " << p.mean << " accepted per round, se " << p.se);
  CHECK(std::fabs(p.mean) < 4.0 * p.se);
}

TEST_CASE("On sampled drafts block and traversal verification accept more than token level",
          "[statistical][accept][tree]") {
  const auto s =
      GENERATE(st::Strategy::kChainSampled, st::Strategy::kTreeIid, st::Strategy::kTreeNoReplacement);
  INFO(st::name(s));
  sd::RecursiveRejectionSampling token;
  sd::TraversalVerification traversal;
  const auto p = paired_difference(s, traversal, token, static_cast<int>(st::outcomes() / 8));
  INFO("traversal - token level: " << p.mean << " accepted per round, se " << p.se);
  CHECK(p.mean > 4.0 * p.se);
}
