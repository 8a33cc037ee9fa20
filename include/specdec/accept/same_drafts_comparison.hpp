// Token-level, block and traversal verification on the same drafts. Fed the
// rounds an engine verified (RoundView: the tree, the target's and the
// draft's rows), it re-verifies each with every rule and counts what each
// would have accepted. The rules see identical drafts and target rows and
// draw from the same uniforms (a fresh Philox stream per round), so the
// comparison of their mean accepted length tau carries none of the drafts'
// variance (a paired design with common random numbers; the papers compare
// separate runs). On a chain block and traversal verification then emit the
// same tokens.
//
// Token level is RecursiveRejectionSampling, which on a chain is speculative
// sampling. Block verification counts chain rounds only; traversal all.
//
// On a round whose child sets are all one-hot (top-k, greedy or n-gram
// drafts) no lossless rule can accept a node v more often than the target's
// own probability of v's path, and token level attains it, so the expected
// accepted drafts are exactly sum_v P_target(path to v): `one_hot_exact`
// records it, a noise-free reference for every rule's mean on such rounds.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "specdec/accept/block_verification.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/accept/traversal_verification.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/round.hpp"

namespace specdec {

class SameDraftsComparison {
 public:
  struct Tally {
    std::int64_t rounds = 0;
    std::int64_t accepted = 0;  // drafted tokens accepted, over the rounds
    // Tokens emitted per round: accepted drafts plus the one drawn after them.
    double tau() const {
      return rounds > 0 ? 1.0 + static_cast<double>(accepted) / static_cast<double>(rounds) : 0.0;
    }
    void add(const VerifyResult& r) {
      ++rounds;
      accepted += r.num_accepted();
    }
  };

  // A rule's accepted drafts minus token level's, round by round: its mean
  // and standard error say whether a difference in tau is more than chance.
  struct Difference {
    std::int64_t rounds = 0;
    double sum = 0.0, sum_sq = 0.0;
    double mean() const { return rounds > 0 ? sum / static_cast<double>(rounds) : 0.0; }
    double standard_error() const {
      if (rounds < 2) return 0.0;
      const double n = static_cast<double>(rounds);
      const double var = (sum_sq - sum * sum / n) / (n - 1.0);
      return var > 0.0 ? std::sqrt(var / n) : 0.0;
    }
    void add(const VerifyResult& rule, const VerifyResult& token) {
      const double d = rule.num_accepted() - token.num_accepted();
      ++rounds;
      sum += d;
      sum_sq += d * d;
    }
  };

  // Expected accepted drafts of one-hot rounds, exactly.
  struct Exact {
    std::int64_t rounds = 0;
    double accepted = 0.0;
    double tau() const { return rounds > 0 ? 1.0 + accepted / static_cast<double>(rounds) : 0.0; }
  };

  explicit SameDraftsComparison(std::uint64_t seed = 0) : seed_(seed) {}

  void observe(const RoundView& v) {
    const DraftTree& tree = *v.tree;
    const std::uint64_t round = static_cast<std::uint64_t>(token_level_.rounds);
    RandomStream token_rng(seed_, round), traversal_rng(seed_, round), block_rng(seed_, round);
    token_rule_.verify(tree, v.target, v.draft, token_rng, token_);
    token_level_.add(token_);
    traversal_rule_.verify(tree, v.target, v.draft, traversal_rng, other_);
    traversal_.add(other_);
    traversal_gain_.add(other_, token_);
    add_one_hot_exact(tree, v.target);
    if (!tree.is_chain()) return;
    token_on_chains_.add(token_);
    block_rule_.verify(tree, v.target, v.draft, block_rng, other_);
    block_.add(other_);
    block_gain_.add(other_, token_);
  }

  const Tally& token_level() const { return token_level_; }
  const Tally& traversal() const { return traversal_; }
  // Chain rounds only: block verification, and token level on the same rounds.
  const Tally& block() const { return block_; }
  const Tally& token_level_on_chains() const { return token_on_chains_; }
  // Accepted drafts per round over token level's, on the same rounds.
  const Difference& traversal_gain() const { return traversal_gain_; }
  const Difference& block_gain() const { return block_gain_; }
  const Exact& one_hot_exact() const { return exact_; }

 private:
  // sum_v prod over v's path of b(x) / mass(b), if every child set is one-hot.
  void add_one_hot_exact(const DraftTree& tree, const ProbRows& target) {
    for (std::int32_t slot = DraftTree::kRoot; slot < tree.size(); ++slot)
      if (tree.num_children(slot) > 0 && tree.children_mode(slot) != ChildMode::kDeterministic) return;
    path_probability_.assign(static_cast<std::size_t>(tree.size()), 0.0);
    double expected = 0.0;
    for (std::int32_t slot = DraftTree::kRoot; slot < tree.size(); ++slot) {
      if (tree.num_children(slot) == 0) continue;
      const auto row = target.row(slot + 1);
      double mass = 0.0;
      for (const float v : row) mass += static_cast<double>(v);
      const double reach = slot == DraftTree::kRoot ? 1.0 : path_probability_[static_cast<std::size_t>(slot)];
      for (auto c = tree.first_child(slot); c >= 0; c = tree.next_sibling(c)) {
        // A repeated sibling token is never accepted twice: count the first.
        if (tree.find_child(slot, tree.token(c)) != c) continue;
        const double p = reach * static_cast<double>(row[static_cast<std::size_t>(tree.token(c))]) / mass;
        path_probability_[static_cast<std::size_t>(c)] = p;
        expected += p;
      }
    }
    ++exact_.rounds;
    exact_.accepted += expected;
  }

  RecursiveRejectionSampling token_rule_;
  BlockVerification block_rule_;
  TraversalVerification traversal_rule_;
  std::uint64_t seed_;
  VerifyResult token_, other_;
  Tally token_level_, traversal_, block_, token_on_chains_;
  Difference traversal_gain_, block_gain_;
  Exact exact_;
  std::vector<double> path_probability_;
};

}  // namespace specdec
