// Helpers shared by the tree builders: budget checks, one checked propose call
// per tree level, and the two ways a slot's children are picked from its draft
// row — top-m (deterministic, mode (c) of docs/methods.md) and m draws
// without replacement (Sequoia, arXiv 2402.12374, §3.2; mode (b)); and the
// builders' options that say which (ChainPick, ChildDraw). Not a component;
// the builders in this folder use it.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "specdec/accept/row_math.hpp"
#include "specdec/core/distribution.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/round.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/types.hpp"

namespace specdec {

// How a chain builder picks each next token from a draft row (ChainBuilder,
// MultiSequenceBuilder's continuations): the top-1 token (deterministic
// children) or a draw (sampled children, verified by speculative sampling).
// kByRequest follows the drafter's request (Drafter::sampling()): top-1 for a
// greedy request, or when the drafter does not say (an n-gram drafter's
// one-hot guesses), a draw for a sampled one.
enum class ChainPick : std::uint8_t { kByRequest, kTop1, kSample };

template <class D>
bool draws_chain(ChainPick pick, const D& drafter) {
  if (pick != ChainPick::kByRequest) return pick == ChainPick::kSample;
  if constexpr (requires { { drafter.sampling() } -> std::convertible_to<const SamplingParams&>; })
    return !drafter.sampling().is_greedy();
  else
    return false;
}

// How a tree builder takes each node's children (StaticTreeBuilder): one
// ChildMode for every request, or by request as ChainPick::kByRequest does:
// the top-k for a greedy request (or when the drafter does not say), drawn
// without replacement for a sampled one. A sampled target accepts a drawn
// child with min(1, p / q), a top-k child with p alone (Sequoia, arXiv
// 2402.12374, §3.2), so top-k trees lose most of their tau when sampling.
struct ChildDraw {
  ChildMode greedy = ChildMode::kDeterministic;
  ChildMode sampled = ChildMode::kDeterministic;

  static constexpr ChildDraw same(ChildMode mode) { return {mode, mode}; }
  static constexpr ChildDraw by_request() {
    return {ChildMode::kDeterministic, ChildMode::kSampledWithoutReplacement};
  }
  bool operator==(const ChildDraw&) const = default;

  template <class D>
  ChildMode mode_for(const D& drafter) const {
    if (greedy == sampled) return greedy;
    if constexpr (requires {
                    { drafter.sampling() } -> std::convertible_to<const SamplingParams&>;
                  })
      return drafter.sampling().is_greedy() ? greedy : sampled;
    else
      return greedy;
  }
};

}  // namespace specdec

namespace specdec::detail {

// A budget with a negative count or a stop threshold outside [0, 1] is a
// policy's mistake: named, never clamped.
inline void check_builder_budget(std::string_view who, const DraftBudget& budget) {
  if (budget.max_depth < 0 || budget.max_nodes < 0 || budget.verify_nodes < 0)
    throw InvalidArgumentError(
        fmt::format("{}: budget counts must be >= 0, got max_depth {}, max_nodes {}, verify_nodes {}", who,
                    budget.max_depth, budget.max_nodes, budget.verify_nodes));
  if (!(budget.stop_below >= 0.0f && budget.stop_below <= 1.0f))
    throw InvalidArgumentError(
        fmt::format("{}: budget stop_below must be in [0, 1], got {}", who, budget.stop_below));
}

// Empties `rows` and gives it the drafter's vocabulary, so the drafter's
// append_row calls produce rows of the right width.
inline std::int64_t reset_rows(std::string_view who, std::int64_t vocab, ProbMatrix& rows) {
  if (vocab <= 0)
    throw ShapeError(fmt::format("{}: the drafter reports a vocabulary of {} tokens", who, vocab));
  rows.resize(0, vocab);
  return vocab;
}

// One propose call for `frontier` (one tree level: one drafter forward). The
// drafter must append exactly one row per frontier slot; returns the index of
// the first of them.
template <class D>
std::int64_t propose_level(std::string_view who, D& drafter, const DraftTree& tree,
                           std::span<const std::int32_t> frontier, std::int64_t vocab, ProbMatrix& rows) {
  const std::int64_t first = rows.num_rows();
  drafter.propose(DraftRequest{&tree, frontier}, rows);
  const auto expected = first + static_cast<std::int64_t>(frontier.size());
  if (rows.num_rows() != expected || rows.vocab() != vocab)
    throw ShapeError(fmt::format(
        "{}: after a propose call for {} frontier slots the draft matrix is [{}, {}], expected [{}, {}] "
        "(a drafter appends one row per slot)",
        who, frontier.size(), rows.num_rows(), rows.vocab(), expected, vocab));
  return first;
}

// False for an all-zero row ("no proposal here", DraftRequest); otherwise the
// row must be a distribution (InvalidDistributionError naming it if not).
inline bool has_proposal(std::string_view who, std::span<const float> row, std::int64_t row_index) {
  bool any = false;
  for (const float v : row)
    if (v != 0.0f) {
      any = true;
      break;
    }
  if (!any) return false;
  check_distribution(row, fmt::format("{}: draft row {}", who, row_index));
  return true;
}

// The (at most) m tokens of highest probability in `row`, best first; equal
// probabilities go to the lower id. Zero-probability tokens are never chosen,
// so a row with fewer than m nonzero entries yields fewer tokens. O(V m) worst
// case, O(V) when most entries lose to the current m-th best.
inline void top_tokens(std::span<const float> row, std::int32_t m, std::vector<TokenId>& out) {
  out.clear();
  if (m <= 0) return;
  for (std::size_t i = 0; i < row.size(); ++i) {
    const float v = row[i];
    if (!(v > 0.0f)) continue;
    if (static_cast<std::int32_t>(out.size()) == m && !(v > row[static_cast<std::size_t>(out.back())]))
      continue;  // not better than the m-th best (a tie keeps the lower id already there)
    // Insert after every entry with probability >= v (higher, or equal with a lower id).
    auto pos = out.end();
    while (pos != out.begin() && row[static_cast<std::size_t>(*(pos - 1))] < v) --pos;
    out.insert(pos, static_cast<TokenId>(i));
    if (static_cast<std::int32_t>(out.size()) > m) out.pop_back();
  }
}

// m tokens drawn from `row` without replacement, in draw order: draw k is an
// inverse-CDF lookup of uniform u[k] over the row with the earlier draws
// removed (the exact fixed-point sum of what is left; row_math::sample_row). This
// is the law of the Gumbel-top-k in Sequoia's reference code
// (`(rand.log() / q).topk(k)`) — sorted keys are successive draws without
// replacement — at m uniforms per
// slot instead of one per vocabulary entry. Stops early when the row has no
// mass left (fewer than m nonzero tokens). `scratch` is reused storage.
inline void sample_without_replacement(std::span<const float> row, std::int32_t m, PhiloxUniforms u,
                                       std::vector<double>& scratch, std::vector<TokenId>& out) {
  out.clear();
  if (m <= 0) return;
  scratch.assign(row.begin(), row.end());
  const auto n = static_cast<std::int64_t>(scratch.size());
  for (std::int32_t k = 0; k < m; ++k) {
    const TokenId x = row_math::sample_row(scratch.data(), n, u[static_cast<std::uint64_t>(k)]);
    if (x == kNoToken) return;
    out.push_back(x);
    scratch[static_cast<std::size_t>(x)] = 0.0;
  }
}

// m tokens drawn i.i.d. from `row` (with replacement: a token may come
// twice), draw k the inverse-CDF lookup of uniform u[k] (row_math::sample_row).
// SpecInfer's multi-step speculative sampling verifies such siblings
// (arXiv 2305.09781, §4.3). Stops early only on a row without mass.
inline void sample_with_replacement(std::span<const float> row, std::int32_t m, PhiloxUniforms u,
                                    std::vector<TokenId>& out) {
  out.clear();
  const auto n = static_cast<std::int64_t>(row.size());
  for (std::int32_t k = 0; k < m; ++k) {
    const TokenId x = row_math::sample_row(row.data(), n, u[static_cast<std::uint64_t>(k)]);
    if (x == kNoToken) return;
    out.push_back(x);
  }
}

}  // namespace specdec::detail
