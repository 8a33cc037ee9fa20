// Verification cost per round of the acceptance rules, on the host: one call
// of Rule::verify on a drafted chain or tree, over vocabularies of 32k and
// 128k and 8-64 drafted nodes. Inputs (bench_inputs.hpp) are precomputed; each
// iteration takes the next of kInstances inputs and draws from one
// RandomStream that keeps advancing, so iterations are not identical.
//
// Time per iteration is the verification time of one round (microseconds).
// Counter mean_accept_len: mean accepted drafted nodes per round (bonus token
// excluded).
#include <cstdint>
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

}  // namespace
}  // namespace specdec::bench

BENCHMARK_MAIN();
