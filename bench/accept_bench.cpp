// Verification cost per round of the acceptance rules, on the host: one call
// of Rule::verify on a drafted chain or tree, over vocabularies of 32k and
// 128k and 8-64 drafted nodes. Inputs (bench_inputs.hpp) are precomputed; each
// iteration takes the next of kInstances inputs and draws from one
// RandomStream that keeps advancing, so iterations are not identical.
//
// Time per iteration is the verification time of one round (microseconds);
// BM_ChainRound is a whole chain round's row work from logits.
// Counter mean_accept_len: mean accepted drafted nodes per round (bonus token
// excluded).
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench_inputs.hpp"
#include "specdec/accept/block_verification.hpp"
#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/accept/speculative_sampling.hpp"
#include "specdec/accept/traversal_verification.hpp"
#include "specdec/accept/typical_acceptance.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/row_kernels.hpp"
#include "specdec/core/warp.hpp"
#include "specdec/core/verify_result.hpp"

namespace specdec::bench {
namespace {

template <class Rule>
void run_rounds(benchmark::State& state, Rule& rule, const std::vector<VerifyInput>& inputs) {
  RandomStream rng(kSeed, /*stream=*/2);
  VerifyResult out;
  std::int64_t accepted = 0;
  std::size_t next = 0;
  for (auto _ : state) {
    const VerifyInput& in = inputs[next];
    next = (next + 1) % inputs.size();
    rule.verify(in.tree, in.target, in.draft, rng, out);
    accepted += out.num_accepted();
    benchmark::DoNotOptimize(out.bonus_token);
  }
  state.counters["mean_accept_len"] =
      benchmark::Counter(static_cast<double>(accepted), benchmark::Counter::kAvgIterations);
}

std::int64_t vocab_arg(const benchmark::State& state) { return state.range(0); }
std::int32_t nodes_arg(const benchmark::State& state) {
  return static_cast<std::int32_t>(state.range(1));
}

// Chain of gamma drafted tokens: sampled from the draft rows (q read by the
// rule), or the draft rows' argmax (greedy drafting: q = one-hot, no rows read).
void BM_SpeculativeSampling_Chain(benchmark::State& state, Children drafting) {
  SpeculativeSampling rule;
  run_rounds(state, rule, verify_inputs(vocab_arg(state), nodes_arg(state), 1, drafting));
}

// Width-2 breadth-first trees, children top-2 of the draft row (mode (c) of
// docs/methods.md) or two i.i.d. draws (mode (a)).
void BM_RecursiveRejectionSampling_Tree(benchmark::State& state, Children children) {
  RecursiveRejectionSampling rule;
  run_rounds(state, rule, verify_inputs(vocab_arg(state), nodes_arg(state), kWidth, children));
}

// Block verification on the same chains: every row is checked, and each
// position past the block's end costs one pass over its row.
void BM_BlockVerification_Chain(benchmark::State& state, Children drafting) {
  BlockVerification rule;
  run_rounds(state, rule, verify_inputs(vocab_arg(state), nodes_arg(state), 1, drafting));
}

// Traversal verification on the same trees: every rejected node costs a pass
// over its parent's row.
void BM_TraversalVerification_Tree(benchmark::State& state, Children children) {
  TraversalVerification rule;
  run_rounds(state, rule, verify_inputs(vocab_arg(state), nodes_arg(state), kWidth, children));
}

void BM_Greedy_Tree(benchmark::State& state) {
  GreedyAcceptance rule;
  run_rounds(state, rule,
             verify_inputs(vocab_arg(state), nodes_arg(state), kWidth, Children::kTopK));
}

void BM_TypicalAcceptance_Tree(benchmark::State& state) {
  TypicalAcceptance rule;
  run_rounds(state, rule,
             verify_inputs(vocab_arg(state), nodes_arg(state), kWidth, Children::kTopK));
}

// The row work of one chain:k=4 round as the engine does it, from logits:
// the drafter warps its 4 rows for the request (draft_sampling_for), the
// builder picks each token (top-1 for a greedy request, a draw otherwise),
// the verifier warps the 5 target rows (one-hot for greedy, in place of a
// cleared buffer as ModelVerifier does), and the rule verifies (greedy, or
// recursive rejection sampling). Synthetic rows (bench_inputs.hpp: a heavy
// head over N(0, 3) logits; the draft adds N(0, 1) noise), 16 instances
// cycled. What a real model's round costs on the host against the vocabulary.
void BM_ChainRound(benchmark::State& state, bool greedy) {
  constexpr std::int32_t kDepth = 4;
  const auto vocab = state.range(0);
  const auto v = static_cast<std::size_t>(vocab);
  std::mt19937_64 gen(kSeed ^ static_cast<std::uint64_t>(vocab));
  std::vector<std::vector<float>> target(kInstances), draft(kInstances);
  for (std::int32_t k = 0; k < kInstances; ++k) {
    target[static_cast<std::size_t>(k)].resize((kDepth + 1) * v);
    draft[static_cast<std::size_t>(k)].resize(kDepth * v);
    for (std::int32_t d = 0; d <= kDepth; ++d) {
      std::span<float> t(target[static_cast<std::size_t>(k)].data() + d * v, v);
      fill_target_logits(gen, t);
      if (d < kDepth) fill_draft_logits(gen, t, std::span<float>(draft[static_cast<std::size_t>(k)].data() + d * v, v));
    }
  }
  SamplingParams request{greedy ? 0.0f : 1.0f};
  const SamplingParams draft_warp = draft_sampling_for(request);
  Warper warp;
  ProbMatrix q(kDepth, vocab), p(kDepth + 1, vocab);
  std::vector<float> one_hot((kDepth + 1) * v, 0.0f);
  std::vector<std::int64_t> hot(kDepth + 1, 0);
  GreedyAcceptance greedy_rule;
  RecursiveRejectionSampling rrs;
  RandomStream rng(kSeed, 3);
  DraftTree tree(kRootToken);
  VerifyResult out;
  std::int64_t accepted = 0;
  std::size_t next = 0;
  for (auto _ : state) {
    const auto& t = target[next];
    const auto& dl = draft[next];
    next = (next + 1) % target.size();
    tree.clear(kRootToken);
    std::int32_t tip = DraftTree::kRoot;
    for (std::int32_t d = 0; d < kDepth; ++d) {
      auto row = q.row(d);
      warp(std::span<const float>(dl.data() + d * v, v), draft_warp, row);
      const TokenId x = greedy ? argmax(row) : row_math::sample_row(row.data(), vocab, rng.uniform());
      tree.set_children_source(tip, d, greedy ? ChildMode::kDeterministic : ChildMode::kSampledWithReplacement);
      tip = tree.add_node(tip, x, row[static_cast<std::size_t>(x)]);
    }
    ProbRows target_rows;
    if (greedy) {
      for (std::int32_t d = 0; d <= kDepth; ++d) {
        float* row = one_hot.data() + d * v;
        row[hot[static_cast<std::size_t>(d)]] = 0.0f;
        const auto scan = row_kernels::max_scan(t.data() + d * v, vocab);
        hot[static_cast<std::size_t>(d)] = row_kernels::first_equal(t.data() + d * v, vocab, scan.max);
        row[hot[static_cast<std::size_t>(d)]] = 1.0f;
      }
      target_rows = ProbRows(one_hot.data(), kDepth + 1, vocab);
      greedy_rule.verify(tree, target_rows, q.view(), rng, out);
    } else {
      for (std::int32_t d = 0; d <= kDepth; ++d) warp(std::span<const float>(t.data() + d * v, v), request, p.row(d));
      rrs.verify(tree, p.view(), q.view(), rng, out);
    }
    accepted += out.num_accepted();
    benchmark::DoNotOptimize(out.bonus_token);
  }
  state.counters["mean_accept_len"] =
      benchmark::Counter(static_cast<double>(accepted), benchmark::Counter::kAvgIterations);
}

void chain_grid(benchmark::internal::Benchmark* b) {
  b->ArgsProduct({{kVocabLlama2, kVocabLlama3}, {8, 16, 32, 64}})
      ->ArgNames({"vocab", "gamma"})
      ->Unit(benchmark::kMicrosecond);
}
void tree_grid(benchmark::internal::Benchmark* b) {
  b->ArgsProduct({{kVocabLlama2, kVocabLlama3}, {8, 16, 32, 64}})
      ->ArgNames({"vocab", "nodes"})
      ->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(BM_SpeculativeSampling_Chain, sampled, Children::kSampled)->Apply(chain_grid);
BENCHMARK_CAPTURE(BM_SpeculativeSampling_Chain, argmax, Children::kTopK)->Apply(chain_grid);
BENCHMARK_CAPTURE(BM_RecursiveRejectionSampling_Tree, topk, Children::kTopK)->Apply(tree_grid);
BENCHMARK_CAPTURE(BM_RecursiveRejectionSampling_Tree, iid, Children::kSampled)->Apply(tree_grid);
BENCHMARK_CAPTURE(BM_BlockVerification_Chain, sampled, Children::kSampled)->Apply(chain_grid);
BENCHMARK_CAPTURE(BM_BlockVerification_Chain, argmax, Children::kTopK)->Apply(chain_grid);
BENCHMARK_CAPTURE(BM_TraversalVerification_Tree, topk, Children::kTopK)->Apply(tree_grid);
BENCHMARK_CAPTURE(BM_TraversalVerification_Tree, iid, Children::kSampled)->Apply(tree_grid);
BENCHMARK(BM_Greedy_Tree)->Apply(tree_grid);
BENCHMARK(BM_TypicalAcceptance_Tree)->Apply(tree_grid);
BENCHMARK_CAPTURE(BM_ChainRound, greedy, true)
    ->Arg(8192)->Arg(kVocabLlama2)->Arg(kVocabLlama3)->ArgName("vocab")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ChainRound, sampled, false)
    ->Arg(8192)->Arg(kVocabLlama2)->Arg(kVocabLlama3)->ArgName("vocab")->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace specdec::bench

BENCHMARK_MAIN();
