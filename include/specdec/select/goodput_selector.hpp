// Speculative Verification (Kim et al., arXiv 2509.24328) as the select phase
// of the one round engine: a companion model scores every request's drafted
// chain in one forward for the whole batch, each drafted token's indicators
// (S, A; select/draft_indicators.hpp) are looked up in the profiled
// acceptance table (select/acceptance_table.hpp), and the verified lengths
// are allocated across the batch for the highest goodput
// (select/goodput.hpp) under the measured latency
// (select/verify_latency.hpp). The drafts beyond a request's length are
// dropped, not verified.
//
// Lossless (docs/acceptance.md, "Speculative Verification"): whether a
// drafted token is verified may depend on the context it was drafted in, and
// not on the token itself beyond what that context determines. So:
//   deterministic drafts (top-1 chains, greedy decoding): S and A (the
//      token is a function of its context);
//   sampled drafts: S only (the similarity-only table). A of a sampled
//      token would decide on that token; biased_sampled_acceptance opts
//      into it (the paper's setting; LOSSY, reported by lossless()).
//      acceptance_after lets a sampled token's A steer only the tokens
//      after it, whose context it is part of (lossless).
// Chains only: a tree's prefix is not a verification length.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/concepts.hpp"
#include "specdec/core/error.hpp"
#include "specdec/select/acceptance_table.hpp"
#include "specdec/select/draft_indicators.hpp"
#include "specdec/select/goodput.hpp"
#include "specdec/select/verify_latency.hpp"

namespace specdec {

struct GoodputOptions {
  std::int32_t min_verify = 0;  // drafts every request verifies at least (it always emits one token)
  // Round time = fixed + Lat(b, n), fixed being what a step of b requests
  // spends outside the target's forward: measured at start-up (the
  // latency profile's fixed(b)), then learned from the steps themselves
  // (observe_step), which also see the rules, commits and bookkeeping.
  // false: Lat alone, the paper's (GPUs overlap drafting with verification).
  bool fixed_cost = true;
  bool verify_all = false;      // verify every draft (standard speculative decoding) and record indicators
  bool biased_sampled_acceptance = false;  // use A on sampled drafts: LOSSY
  // Sampled drafts: whether token i is verified is decided on the S-only
  // estimate of token i times the joint (S, A) estimates of tokens 1..i-1,
  // all of which token i's context determines (docs/acceptance.md, "Cutting
  // after the token"). Lossless; needs both tables.
  bool acceptance_after = false;
};

// Companion: a Verifier over the companion model whose rows are warped as
// the draft's (ModelVerifier with the draft's sampling parameters).
template <Verifier Companion>
class GoodputSelector {
 public:
  // What the last select() saw of one request: each drafted token's
  // indicators and acceptance estimate, and how many were verified.
  struct Round {
    std::vector<DraftIndicators> indicators;
    std::vector<float> estimates;
    std::int32_t verified = 0;
    bool sampled = false;  // the chain's tokens were sampled
  };

  // joint: the (S, A) table; similarity: the S-only table (one A bin). A
  // schedule needs the table its drafts may use (see above); verify_all needs
  // neither.
  GoodputSelector(Companion& companion, AcceptanceTable joint, AcceptanceTable similarity, VerifyLatency latency,
                  GoodputOptions options = {})
      : companion_(&companion),
        joint_(std::move(joint)),
        similarity_(std::move(similarity)),
        latency_(std::move(latency)),
        options_(options) {
    if (!similarity_.empty() && !similarity_.similarity_only())
      throw InvalidArgumentError(fmt::format(
          "GoodputSelector: the similarity-only table has {} A bins (it must have one)", similarity_.a_bins()));
    if (options_.min_verify < 0)
      throw InvalidArgumentError(fmt::format("GoodputSelector: min_verify {} < 0", options_.min_verify));
    if (options_.acceptance_after && options_.biased_sampled_acceptance)
      throw InvalidArgumentError(
          "GoodputSelector: acceptance_after (A steers the tokens after a sampled token) and "
          "biased_sampled_acceptance (A steers the token itself) exclude each other");
    if (options_.acceptance_after && !options_.verify_all && (joint_.empty() || similarity_.empty()))
      throw InvalidArgumentError(
          "GoodputSelector: acceptance_after needs the (S, A) table and the similarity-only table");
    if (!options_.verify_all && latency_.empty())
      throw InvalidArgumentError("GoodputSelector: no latency profile (measure_verify_latency)");
  }

  Companion& companion() { return *companion_; }
  const GoodputOptions& options() const { return options_; }
  // False once a sampled draft was scheduled with A (biased_sampled_acceptance).
  bool lossless() const { return lossless_; }
  const Round& last_round(std::int32_t seq) const {
    const auto it = rounds_.find(seq);
    if (it == rounds_.end()) throw InvalidArgumentError(fmt::format("GoodputSelector: no round of sequence {}", seq));
    return it->second;
  }

  // The request lifecycle (TrackingSelector): the companion follows each
  // request's committed tokens.
  void begin(std::int32_t seq, std::span<const TokenId> prompt) { companion_->begin(seq, prompt); }
  void commit(std::int32_t seq, const DraftTree& verified, const VerifyResult& result) {
    companion_->commit(seq, verified, result);  // a prefix of the scored chain: node indices agree
  }
  void end(std::int32_t seq) {
    rounds_.erase(seq);
    companion_->end(seq);
  }

  // The engine's report of each step (StepTiming): what the step spent
  // outside the target's forward, averaged per batch size (exponentially,
  // weight 0.2 for the newest), replaces the start-up estimate of fixed(b).
  void observe_step(const StepTiming& t) {
    if (t.requests < 1) return;
    const auto b = static_cast<std::size_t>(t.requests);
    if (learned_.size() <= b) learned_.resize(b + 1, -1.0);
    const double other = std::max(0.0, t.step_seconds - t.score_seconds);
    learned_[b] = learned_[b] < 0 ? other : 0.8 * learned_[b] + 0.2 * other;
  }
  // The fixed part of a round of b requests the allocation uses now.
  double fixed_seconds(std::int32_t b) const {
    if (!options_.fixed_cost) return 0.0;
    const auto i = static_cast<std::size_t>(b);
    if (i < learned_.size() && learned_[i] >= 0) return learned_[i];
    return latency_.fixed_seconds(b);
  }

  void select(std::span<Selection> batch) {
    items_.clear();
    for (const auto& s : batch) {
      if (s.drafted == nullptr || s.selected == nullptr)
        throw InvalidArgumentError("GoodputSelector: a selection has no drafted or selected tree");
      if (!s.drafted->is_chain())
        throw InvalidTreeError(fmt::format(
            "GoodputSelector: request {} drafted a tree; Speculative Verification chooses a prefix of a chain", s.seq));
      // The companion's rows are warped as the drafter's are, so S and A
      // compare like with like.
      items_.push_back(ScoreItem{s.seq, s.drafted, draft_sampling_for(s.sampling)});
    }
    companion_rows_.resize(items_.size());
    companion_->score(items_, companion_rows_);  // one companion forward for the batch
    estimates_.resize(batch.size());
    after_.resize(batch.size());
    bool any_after = false;
    for (std::size_t q = 0; q < batch.size(); ++q)
      any_after |= estimate(batch[q], companion_rows_[q], estimates_[q], after_[q]);
    GoodputAllocation allocation;
    if (options_.verify_all) {
      for (const auto& s : batch) allocation.lengths.push_back(s.drafted->size());
    } else {
      allocation = allocate_goodput(
          estimates_, latency_, options_.min_verify, fixed_seconds(static_cast<std::int32_t>(batch.size())),
          any_after ? std::span<const std::vector<float>>(after_) : std::span<const std::vector<float>>());
    }
    for (std::size_t q = 0; q < batch.size(); ++q) {
      Selection& s = batch[q];
      const auto g = allocation.lengths[q];
      rounds_[s.seq].verified = g;
      if (g == s.drafted->size()) continue;  // verified as drafted
      keep_prefix(*s.drafted, g, *s.selected);
      s.use_selected = true;
    }
  }

 private:
  // The acceptance estimate of each of s's drafted tokens (p), and with
  // acceptance_after on a sampled chain the estimates the later tokens see
  // (after, the joint table's; returns true). after is left as p otherwise.
  bool estimate(const Selection& s, const ProbRows& companion, std::vector<float>& p,
                std::vector<float>& after) {
    const DraftTree& tree = *s.drafted;
    Round& round = rounds_[s.seq];
    round.indicators.clear();
    round.estimates.clear();
    round.sampled = false;
    for (std::int32_t i = 0; i < tree.size(); ++i) round.sampled |= tree.children_mode(i - 1) != ChildMode::kDeterministic;
    const AcceptanceTable* table = nullptr;
    if (!options_.verify_all) table = table_for(round.sampled, s.seq);
    const bool use_after = table != nullptr && round.sampled && options_.acceptance_after;
    p.clear();
    after.clear();
    for (std::int32_t i = 0; i < tree.size(); ++i) {
      const auto slot = i - 1;  // the chain's parent of node i (the root for node 0)
      const auto ind = draft_indicators(s.draft_rows.row(tree.children_draft_row(slot)), companion.row(i),
                                        tree.token(i));
      round.indicators.push_back(ind);
      const float e = table ? table->lookup(ind.similarity, ind.acceptance) : 1.0f;
      round.estimates.push_back(e);
      p.push_back(e);
      after.push_back(use_after ? joint_.lookup(ind.similarity, ind.acceptance) : e);
    }
    return use_after;
  }

  const AcceptanceTable* table_for(bool sampled, std::int32_t seq) {
    if (sampled && !options_.biased_sampled_acceptance) {
      if (similarity_.empty())
        throw InvalidArgumentError(fmt::format(
            "GoodputSelector: request {} drafted sampled tokens, which only the similarity-only table may schedule "
            "(A would decide on the token itself and bias the output); none was given",
            seq));
      return &similarity_;
    }
    if (sampled && !joint_.empty()) lossless_ = false;
    if (!joint_.empty()) return &joint_;
    if (!similarity_.empty()) return &similarity_;
    throw InvalidArgumentError("GoodputSelector: no acceptance table to schedule with");
  }

  // The first g nodes of chain `from`, with their slots' sources.
  static void keep_prefix(const DraftTree& from, std::int32_t g, DraftTree& to) {
    to.clear(from.root_token());
    for (std::int32_t i = 0; i < g; ++i) {
      const auto slot = i - 1;
      to.add_node(slot, from.token(i), from.node(i).draft_prob);
      to.set_children_source(slot, from.children_draft_row(slot), from.children_mode(slot));
    }
  }

  Companion* companion_;
  AcceptanceTable joint_, similarity_;
  VerifyLatency latency_;
  GoodputOptions options_;
  bool lossless_ = true;
  std::unordered_map<std::int32_t, Round> rounds_;
  std::vector<double> learned_;  // [batch size]: seconds a step spends outside the target's forward, -1 unseen
  std::vector<ScoreItem> items_;
  std::vector<ProbRows> companion_rows_;
  std::vector<std::vector<float>> estimates_;
  std::vector<std::vector<float>> after_;  // acceptance_after: what the later tokens see
};

}  // namespace specdec
