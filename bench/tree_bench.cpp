// Per-round cost of building and reshaping draft trees on the host, and of
// warping one row of logits: what a decoder does around each verification.
// Inputs (bench_inputs.hpp) are precomputed; each iteration takes the next of
// kInstances inputs. Time per iteration is one round (microseconds).
#include <cstdint>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench_inputs.hpp"
#include "specdec/accept/row_math.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/draft_tree_ops.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/warp.hpp"

namespace specdec::bench {
namespace {

// Trees whose shape, not vocabulary, matters are built from 32k rows.
constexpr std::int64_t kShapeVocab = kVocabLlama2;

// Breadth-first top-2 tree from precomputed draft rows: per expanded slot a
// partial sort of the vocab row, add_node per child, set_children_source.
void BM_DraftTree_BuildTopK(benchmark::State& state) {
  const std::int64_t vocab = state.range(0);
  const auto num_nodes = static_cast<std::int32_t>(state.range(1));
  const RowPool& pool = row_pool(vocab);
  std::vector<ProbRows> drafts;
  for (std::int32_t k = 0; k < kInstances; ++k)
    drafts.push_back(window(pool.draft, k, num_nodes + 1));
  DraftTree tree;
  TopK top_k;
  std::size_t next = 0;
  for (auto _ : state) {
    build_topk_tree(tree, drafts[next], num_nodes, kWidth, top_k);
    next = (next + 1) % drafts.size();
    benchmark::DoNotOptimize(tree.nodes().data());
  }
}

// The packed [nodes + 1, nodes + 1] tree attention mask, root included.
void BM_DraftTree_AncestorMask(benchmark::State& state) {
  const auto num_nodes = static_cast<std::int32_t>(state.range(0));
  const auto& inputs = verify_inputs(kShapeVocab, num_nodes, kWidth, Children::kTopK);
  std::size_t next = 0;
  for (auto _ : state) {
    const BitMatrix mask = inputs[next].tree.ancestor_mask();
    next = (next + 1) % inputs.size();
    benchmark::DoNotOptimize(mask.words().data());
  }
}

// EAGLE-2 style rerank: a width-4 top-k tree of `source` nodes cut to the
// `budget` nodes of highest cumulative draft log-probability.
void BM_DraftTree_PruneToBudget(benchmark::State& state) {
  const auto source = static_cast<std::int32_t>(state.range(0));
  const auto budget = static_cast<std::int32_t>(state.range(1));
  const auto& inputs = verify_inputs(kShapeVocab, source, 4, Children::kTopK);
  std::size_t next = 0;
  for (auto _ : state) {
    const PrunedTree pruned = prune_to_budget(inputs[next].tree, budget);
    next = (next + 1) % inputs.size();
    benchmark::DoNotOptimize(pruned.tree.nodes().data());
  }
}

// The second tree of a trie union: i.i.d. children (width 2) drafted as a
// second drafter would, from the same distribution as `a` wherever its prefix
// is one of a's paths (the draft row a uses there) and from `fresh` rows off
// a's paths. So the two trees overlap where the drafters agree.
DraftTree sampled_tree_beside(const DraftTree& a, const ProbRows& a_rows, const ProbRows& fresh,
                              std::int32_t num_nodes, RandomStream& rng) {
  DraftTree b(kRootToken);
  std::vector<std::int32_t> in_a;  // a's node equal to b's node i, or -1
  for (std::int32_t slot = DraftTree::kRoot; b.size() < num_nodes; ++slot) {
    const std::int32_t a_slot = slot == DraftTree::kRoot ? DraftTree::kRoot
                                                         : in_a[static_cast<std::size_t>(slot)];
    const bool on_a = slot == DraftTree::kRoot || a_slot >= 0;
    const auto row = on_a ? a_rows.row(a_slot + 1) : fresh.row(slot + 1);
    for (std::int32_t j = 0; j < kWidth && b.size() < num_nodes; ++j) {
      const TokenId x = row_math::sample_row(row.data(), a_rows.vocab(), rng.uniform());
      b.add_node(slot, x, row[static_cast<std::size_t>(x)]);
      in_a.push_back(on_a ? a.find_child(a_slot, x) : -1);
    }
    b.set_children_source(slot, slot + 1, ChildMode::kSampledWithReplacement);
  }
  return b;
}

// Lyanna verification fusion: the trie union of a top-2 tree and an i.i.d.
// tree of the same size (sampled_tree_beside), b's draft rows after a's.
// Counter union_nodes: mean size of the union (2 * nodes when nothing merges).
void BM_DraftTree_TrieUnion(benchmark::State& state) {
  const auto num_nodes = static_cast<std::int32_t>(state.range(0));
  const auto& a = verify_inputs(kShapeVocab, num_nodes, kWidth, Children::kTopK);
  const RowPool& pool = row_pool(kShapeVocab);
  RandomStream rng(kSeed, /*stream=*/3);
  std::vector<DraftTree> b;
  for (std::int32_t k = 0; k < kInstances; ++k) {
    const VerifyInput& in = a[static_cast<std::size_t>(k)];
    const ProbRows fresh = window(pool.draft, kPoolRows - num_nodes - 1 - k, num_nodes + 1);
    b.push_back(sampled_tree_beside(in.tree, in.draft, fresh, num_nodes, rng));
  }
  std::int64_t union_nodes = 0;
  std::size_t next = 0;
  for (auto _ : state) {
    const TreeUnion u = trie_union(a[next].tree, b[next], num_nodes + 1);
    next = (next + 1) % a.size();
    union_nodes += u.tree.size();
    benchmark::DoNotOptimize(u.tree.nodes().data());
  }
  state.counters["union_nodes"] =
      benchmark::Counter(static_cast<double>(union_nodes), benchmark::Counter::kAvgIterations);
}

// One row of logits to a distribution with a long-lived Warper.
void BM_Warp(benchmark::State& state, SamplingParams params) {
  const std::int64_t vocab = state.range(0);
  constexpr int kRows = 8;
  std::mt19937_64 gen(kSeed);
  std::vector<std::vector<float>> logits(kRows,
                                         std::vector<float>(static_cast<std::size_t>(vocab)));
  for (auto& row : logits) fill_target_logits(gen, row);
  std::vector<float> probs(static_cast<std::size_t>(vocab));
  Warper warp;
  std::size_t next = 0;
  for (auto _ : state) {
    warp(logits[next], params, probs);
    next = (next + 1) % logits.size();
    benchmark::DoNotOptimize(probs.data());
    benchmark::ClobberMemory();
  }
}

BENCHMARK(BM_DraftTree_BuildTopK)
    ->ArgsProduct({{kVocabLlama2, kVocabLlama3}, {8, 16, 32, 64}})
    ->ArgNames({"vocab", "nodes"})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DraftTree_AncestorMask)
    ->ArgsProduct({{8, 16, 32, 64}})
    ->ArgNames({"nodes"})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DraftTree_PruneToBudget)
    ->ArgsProduct({{64, 128}, {8, 16, 32, 64}})
    ->ArgNames({"source", "budget"})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DraftTree_TrieUnion)
    ->ArgsProduct({{8, 16, 32, 64}})
    ->ArgNames({"nodes"})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Warp, temperature, SamplingParams{.temperature = 0.8f})
    ->ArgsProduct({{8192, kVocabLlama2, kVocabLlama3}})
    ->ArgNames({"vocab"})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Warp, top_k50, SamplingParams{.temperature = 0.8f, .top_k = 50})
    ->ArgsProduct({{8192, kVocabLlama2, kVocabLlama3}})
    ->ArgNames({"vocab"})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Warp, top_p0.9, SamplingParams{.temperature = 0.8f, .top_p = 0.9f})
    ->ArgsProduct({{8192, kVocabLlama2, kVocabLlama3}})
    ->ArgNames({"vocab"})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace specdec::bench

BENCHMARK_MAIN();
