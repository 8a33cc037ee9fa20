// What the Llama models' tests (CPU and CUDA) share: one sequence's forward
// into host logits, consecutive positions, a row's logits against the
// plain-loops reference (reference_llama.hpp), and the scenarios both
// models must pass over a checkpoint of the reference (tiny_llama_config:
// vocabulary 97, 128 positions).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "specdec/core/bit_matrix.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/round.hpp"
#include "specdec/core/types.hpp"
#include "specdec/engine/autoregressive_decoder.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/tree/dynamic_tree_builder.hpp"
#include "support/catch.hpp"
#include "support/reference_llama.hpp"

namespace specdec::testing {

// One sequence's forward of `tokens` at `positions` (a causal chain, or
// `mask`), host logits.
template <class M>
std::vector<float> run(M& m, std::int32_t seq, const std::vector<TokenId>& tokens,
                       const std::vector<std::int64_t>& positions, PackedMask mask = {},
                       bool extend = false) {
  std::vector<float> logits(tokens.size() * static_cast<std::size_t>(m.vocab_size()));
  const std::vector<SequenceInput> seqs = {{seq, tokens, positions, mask, extend}};
  m.forward(
      {seqs,
       TensorView(logits.data(), DType::kF32, {static_cast<std::int64_t>(tokens.size()), m.vocab_size()}),
       {},
       -1});
  return logits;
}

inline std::vector<std::int64_t> positions_from(std::int64_t first, std::size_t n) {
  std::vector<std::int64_t> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = first + static_cast<std::int64_t>(i);
  return p;
}

// Row `row` of `logits` against the reference's logits after `context`.
inline void check_row(const std::vector<float>& logits, std::size_t row, const ReferenceLlama& ref,
                      const std::vector<TokenId>& context, double tolerance) {
  const auto want = ref.last_logits(context);
  double worst = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(logits[row * want.size() + i]) - want[i]));
  INFO("context of " << context.size() << " tokens, row " << row);
  CHECK(worst < tolerance);
}

// A prompt's prefill, decode steps after accept, and a ragged batch
// (sequence 1 prefilling while sequence 0 steps), every row against `ref`.
template <class M>
void check_prefill_steps_batch(const ReferenceLlama& ref, M& m, double tolerance) {
  const std::vector<TokenId> prompt = {3, 14, 15, 92, 65, 35, 89, 79};
  m.open(0);
  const auto pre = run(m, 0, prompt, positions_from(0, prompt.size()));
  std::vector<TokenId> ctx;
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    ctx.push_back(prompt[i]);
    check_row(pre, i, ref, ctx, tolerance);
  }
  m.accept(0, std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(m.cached_length(0) == 8);
  for (const TokenId t : {26, 53, 58}) {  // decode steps
    const auto step = run(m, 0, {t}, {static_cast<std::int64_t>(ctx.size())});
    ctx.push_back(t);
    check_row(step, 0, ref, ctx, tolerance);
    m.accept(0, std::vector<std::int32_t>{0});
  }
  m.open(1);
  const std::vector<TokenId> other = {9, 7, 9}, next = {32};
  std::vector<float> logits(4 * static_cast<std::size_t>(m.vocab_size()));
  const auto p1 = positions_from(0, 3), p0 = positions_from(static_cast<std::int64_t>(ctx.size()), 1);
  const std::vector<SequenceInput> seqs = {{1, other, p1, {}, false}, {0, next, p0, {}, false}};
  m.forward({seqs, TensorView(logits.data(), DType::kF32, {4, m.vocab_size()}), {}, -1});
  check_row(logits, 2, ref, other, tolerance);
  ctx.push_back(32);
  check_row(logits, 3, ref, ctx, tolerance);
}

// A tree under its mask, grown a level (extend_staged), accept(path), the
// step after it, and rollback, every row against `ref`.
template <class M>
void check_tree_accept_rollback(const ReferenceLlama& ref, M& m, double tolerance) {
  const std::vector<TokenId> prompt = {5, 8, 13, 21, 34};
  m.open(4);
  run(m, 4, prompt, positions_from(0, prompt.size()));
  m.accept(4, std::vector<std::int32_t>{0, 1, 2, 3, 4});
  // The tree: root 40 -> {41 -> 43, 42}; nodes 0: 40, 1: 41, 2: 42, 3: 43.
  const std::vector<TokenId> tree = {40, 41, 42, 43};
  const std::vector<std::int32_t> parent = {-1, 0, 0, 1};
  BitMatrix mask(4);
  for (std::int32_t i = 0; i < 4; ++i)
    for (std::int32_t a = i; a >= 0; a = parent[static_cast<std::size_t>(a)]) mask.set(i, a);
  const auto logits = run(m, 4, tree, {5, 6, 6, 7}, PackedMask::of(mask));
  const std::vector<std::vector<TokenId>> paths = {{40}, {40, 41}, {40, 42}, {40, 41, 43}};
  for (std::size_t i = 0; i < 4; ++i) {
    auto ctx = prompt;
    ctx.insert(ctx.end(), paths[i].begin(), paths[i].end());
    check_row(logits, i, ref, ctx, tolerance);
  }
  // Grow the tree by one level (extend_staged): node 4 = 44 under node 2.
  BitMatrix grown(5);
  for (std::int32_t i = 0; i < 4; ++i)
    for (std::int32_t j = 0; j < 4; ++j)
      if (mask.test(i, j)) grown.set(i, j);
  grown.set(4, 4);
  grown.set(4, 2);
  grown.set(4, 0);
  const auto more = run(m, 4, {44}, {7}, PackedMask::of(grown), true);
  check_row(more, 0, ref, {5, 8, 13, 21, 34, 40, 42, 44}, tolerance);
  // Accept 40 -> 42 -> 44: the next step sees exactly those.
  m.accept(4, std::vector<std::int32_t>{0, 2, 4});
  CHECK(m.cached_length(4) == 8);
  const auto after = run(m, 4, {45}, {8});
  check_row(after, 0, ref, {5, 8, 13, 21, 34, 40, 42, 44, 45}, tolerance);
  // Roll back to the prompt and go another way.
  m.rollback(4, 5);
  const auto other = run(m, 4, {46}, {5});
  check_row(other, 0, ref, {5, 8, 13, 21, 34, 46}, tolerance);
}

// What every Llama model refuses: a sequence not open, a token outside the
// vocabulary, a position outside the context, a path that does not
// increase, a rollback past what is committed, closing what is not open.
template <class M>
void check_refusals(M& m) {
  CHECK_THROWS_AS(run(m, 3, {1}, {0}), InvalidArgumentError);  // not open
  m.open(3);
  CHECK_THROWS_AS(run(m, 3, {97}, {0}), ShapeError);
  CHECK_THROWS_AS(run(m, 3, {1}, {128}), ShapeError);
  run(m, 3, {1, 2}, {0, 1});
  CHECK_THROWS_AS(m.accept(3, std::vector<std::int32_t>{1, 0}), InvalidArgumentError);
  CHECK_THROWS_AS(m.rollback(3, 1), InvalidArgumentError);  // nothing committed yet
  CHECK_THROWS_AS(m.close(8), InvalidArgumentError);
}

// Greedy speculation equals greedy autoregressive decoding of `target`
// (40 tokens, two prompts): `speculate(draft, builder, budget, prompt,
// options)` with the target drafting for itself (every draft accepted,
// long paths compacted) and with `other`, a draft that is often wrong, in
// chains and a dynamic tree.
template <class M, class Speculate>
void check_greedy_speculation(M& target, M& other, Speculate speculate) {
  GenerationOptions options;
  options.max_new_tokens = 40;
  options.sampling.temperature = 0.0f;
  for (const std::vector<TokenId>& prompt :
       {std::vector<TokenId>{4, 8, 15, 16, 23, 42}, std::vector<TokenId>{1}}) {
    AutoregressiveDecoder<M> ar(target, 0);
    const auto want = ar.generate(prompt, options).tokens;
    REQUIRE(want.size() == 40);
    const DraftBudget chain = FixedLength::chain(4).budget(), tree{3, 8, 8, 0.0f};
    CHECK(speculate(target, ChainBuilder{}, chain, prompt, options) == want);
    CHECK(speculate(other, ChainBuilder{}, chain, prompt, options) == want);
    CHECK(speculate(other, DynamicTreeBuilder{3, 3, 8}, tree, prompt, options) == want);
  }
}

}  // namespace specdec::testing
