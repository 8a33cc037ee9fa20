// The exact law of the first n tokens a lossless decoder emits: what every
// statistical test of a rule or a whole method compares its counts with
// (chi_square.hpp). For a model whose next-token logits after a context are
// `logits_of(context)`, warped by `sampling` as the engine warps them:
//   P(t_1 .. t_n) = prod_i warp(logits_of(prompt + t_1 .. t_{i-1}))[t_i]
// (the output law any lossless speculative decoder must keep: arXiv
// 2211.17192, Theorem 1; the losslessness invariant of docs/design.md §5).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/types.hpp"
#include "specdec/core/warp.hpp"

namespace specdec::testing {

// The law as a flat vector of vocab^n probabilities, outcome (t_1 .. t_n) at
// index t_1 vocab^(n-1) + ... + t_n. `logits_of(context)` returns `vocab`
// logits for a context (the prompt and the tokens drawn so far). Throws
// InvalidArgumentError for n < 1 or vocab^n beyond 2^24 outcomes, ShapeError
// for a logits row of another size.
template <class LogitsOf>
std::vector<double> exact_law(LogitsOf&& logits_of, std::span<const TokenId> prompt, int n,
                              std::int64_t vocab, const SamplingParams& sampling) {
  sampling.validate();
  if (n < 1 || vocab < 1) throw InvalidArgumentError(fmt::format("exact_law: n = {}, vocab = {}", n, vocab));
  std::int64_t cells = 1;
  for (int i = 0; i < n; ++i) {
    cells *= vocab;
    if (cells > (std::int64_t{1} << 24))
      throw InvalidArgumentError(
          fmt::format("exact_law: {}^{} outcomes are too many to enumerate (at most 2^24)", vocab, n));
  }
  std::vector<double> law(static_cast<std::size_t>(cells));
  std::vector<TokenId> context(prompt.begin(), prompt.end());
  std::vector<float> probs(static_cast<std::size_t>(vocab));
  Warper warp;
  // Depth-first over prefixes: `mass` is the prefix's probability, `index`
  // its outcome index so far.
  const auto visit = [&](const auto& self, int depth, double mass, std::int64_t index) -> void {
    const std::vector<float> logits = logits_of(std::span<const TokenId>(context));
    if (static_cast<std::int64_t>(logits.size()) != vocab)
      throw ShapeError(fmt::format("exact_law: {} logits for a vocabulary of {}", logits.size(), vocab));
    warp(logits, sampling, probs);
    const std::vector<float> row = probs;  // probs is reused below
    for (std::int64_t t = 0; t < vocab; ++t) {
      const double p = mass * static_cast<double>(row[static_cast<std::size_t>(t)]);
      if (depth + 1 == n) {
        law[static_cast<std::size_t>(index * vocab + t)] = p;
      } else if (p > 0.0) {
        context.push_back(static_cast<TokenId>(t));
        self(self, depth + 1, p, index * vocab + t);
        context.pop_back();
      }
    }
  };
  visit(visit, 0, 1.0, 0);
  return law;
}

}  // namespace specdec::testing
