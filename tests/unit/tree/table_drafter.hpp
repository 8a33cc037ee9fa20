// A synthetic Drafter for the tree-builder tests: the row for a frontier slot
// is a fixed function of (token of the slot, depth of the slot) — the root's
// token and depth 0 for the root — and every propose call is recorded, so a
// test can check frontiers, row indices and call counts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "specdec/concepts.hpp"

namespace specdec::testing {

struct ProposeCall {
  std::vector<std::int32_t> frontier;  // slots as requested
  std::vector<TokenId> tokens;         // token of each slot
  std::vector<std::int32_t> depths;    // depth of each slot (0: root)
  std::int64_t first_row = 0;          // row index of the first slot's row
};

class TableDrafter {
 public:
  static constexpr bool kProvidesProbs = true;
  using RowFn = std::function<std::vector<float>(TokenId token, std::int32_t depth)>;

  TableDrafter(std::int64_t vocab, RowFn fn) : vocab_(vocab), fn_(std::move(fn)) {}

  std::int64_t vocab_size() const { return vocab_; }
  void begin(std::span<const TokenId>, const SamplingParams& sampling = {}) { sampling_ = sampling; }
  void commit(std::span<const TokenId>) {}
  void end() {}
  // The request's sampling, as ModelDrafter says it (builders that follow the request read it).
  const SamplingParams& sampling() const { return sampling_; }

  void propose(const DraftRequest& request, ProbMatrix& rows) {
    ProposeCall call;
    call.first_row = rows.num_rows();
    for (const auto slot : request.frontier) {
      const TokenId token = slot == DraftTree::kRoot ? request.tree->root_token() : request.tree->token(slot);
      const std::int32_t depth = slot == DraftTree::kRoot ? 0 : request.tree->depth(slot);
      const auto r = fn_(token, depth);
      auto dst = rows.append_row();
      std::copy(r.begin(), r.end(), dst.begin());
      call.frontier.push_back(slot);
      call.tokens.push_back(token);
      call.depths.push_back(depth);
    }
    calls.push_back(std::move(call));
  }

  std::vector<float> row_for(TokenId token, std::int32_t depth) const { return fn_(token, depth); }

  std::vector<ProposeCall> calls;

 private:
  std::int64_t vocab_;
  RowFn fn_;
  SamplingParams sampling_;
};

static_assert(Drafter<TableDrafter>);

// A row whose weights are small integers drawn from (seed, token, depth):
// zeros and exact ties are frequent, and at least one weight is positive.
inline std::vector<float> random_row(std::uint32_t seed, TokenId token, std::int32_t depth,
                                     std::int64_t vocab, int max_weight = 4) {
  std::mt19937 gen(seed * 1000003u + static_cast<std::uint32_t>(token) * 7919u +
                   static_cast<std::uint32_t>(depth) * 104729u);
  std::uniform_int_distribution<int> w(0, max_weight);
  std::vector<float> row(static_cast<std::size_t>(vocab));
  double total = 0.0;
  for (auto& v : row) total += v = static_cast<float>(w(gen));
  if (total == 0.0) {
    row[static_cast<std::size_t>(token) % row.size()] = 1.0f;
    total = 1.0;
  }
  for (auto& v : row) v = static_cast<float>(v / total);
  return row;
}

}  // namespace specdec::testing
