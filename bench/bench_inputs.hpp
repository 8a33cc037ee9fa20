// Inputs shared by the benchmarks, all built outside the timed loops:
//  - synthetic next-token distributions shaped like an LLM's: a tail of
//    N(0, 3^2) logits with a head of 4 tokens holding most of the mass (mean
//    top-1 probability ~0.63, entropy ~2-2.6 nats), softmaxed with
//    specdec::Warper at temperature 1;
//  - a draft that is a noisy copy of the target (logits + N(0, 1)), so that
//    sum_x min(p, q) ~0.77 and acceptance is partial, as with a real drafter;
//  - draft trees of a fixed breadth-first shape (every expanded slot gets
//    `width` children until the node budget is spent) whose tokens come from
//    the draft rows, top-k or sampled.
//
// Row layout: row r of a window is the distribution at slot r - 1 (row 0 is
// the root), for target and draft alike, so a tree of n nodes reads rows
// [0, n] of both and slot s records draft row s + 1 as its children source.
// A benchmark cycles through kInstances windows of one row pool (window k
// starts at pool row k), so consecutive rounds see different rows and trees.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <span>
#include <tuple>
#include <vector>

#include "specdec/accept/row_math.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/types.hpp"
#include "specdec/core/warp.hpp"

namespace specdec::bench {

inline constexpr std::int64_t kVocabLlama2 = 32000;   // Llama 2, Vicuna
inline constexpr std::int64_t kVocabLlama3 = 128256;  // Llama 3
inline constexpr std::int32_t kWidth = 2;             // children per expanded slot
inline constexpr std::int32_t kInstances = 16;        // windows a benchmark cycles through
inline constexpr std::int32_t kMaxPoolNodes = 128;    // largest tree built from a window
inline constexpr std::int64_t kPoolRows = kMaxPoolNodes + 1 + kInstances - 1;
inline constexpr TokenId kRootToken = 1;
inline constexpr std::uint64_t kSeed = 20240607;

// Raw logits of one target row (see the top of the file).
inline void fill_target_logits(std::mt19937_64& gen, std::span<float> logits) {
  std::normal_distribution<float> normal;
  for (float& v : logits) v = 3.0f * normal(gen);
  // log-sum-exp of the tail, so head offsets are relative to the tail's mass.
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v - max_logit));
  const auto lse = static_cast<float>(max_logit + std::log(sum));
  std::uniform_real_distribution<float> head(-2.0f, 4.0f);
  std::uniform_int_distribution<std::size_t> token(0, logits.size() - 1);
  for (int j = 0; j < 4; ++j) logits[token(gen)] = lse + head(gen) - 2.0f * static_cast<float>(j);
}

// Draft logits: the target's plus N(0, 1) noise on every token.
inline void fill_draft_logits(std::mt19937_64& gen, std::span<const float> target,
                              std::span<float> draft) {
  std::normal_distribution<float> normal;
  for (std::size_t i = 0; i < target.size(); ++i) draft[i] = target[i] + normal(gen);
}

// kPoolRows warped target rows and their noisy draft copies   // [kPoolRows, vocab]
struct RowPool {
  ProbMatrix target;
  ProbMatrix draft;
};

// Built once per vocabulary per process (~1 s at 128k), then shared.
inline const RowPool& row_pool(std::int64_t vocab) {
  static std::map<std::int64_t, RowPool> pools;
  auto it = pools.find(vocab);
  if (it != pools.end()) return it->second;
  RowPool pool{ProbMatrix(kPoolRows, vocab), ProbMatrix(kPoolRows, vocab)};
  std::mt19937_64 gen(kSeed ^ static_cast<std::uint64_t>(vocab));
  std::vector<float> target_logits(static_cast<std::size_t>(vocab));
  std::vector<float> draft_logits(static_cast<std::size_t>(vocab));
  Warper warp;
  const SamplingParams softmax;  // temperature 1, no top-k / top-p
  for (std::int64_t r = 0; r < kPoolRows; ++r) {
    fill_target_logits(gen, target_logits);
    fill_draft_logits(gen, target_logits, draft_logits);
    warp(target_logits, softmax, pool.target.row(r));
    warp(draft_logits, softmax, pool.draft.row(r));
  }
  return pools.emplace(vocab, std::move(pool)).first->second;
}

// Rows [first, first + num_rows) of m as a view.
inline ProbRows window(const ProbMatrix& m, std::int64_t first, std::int64_t num_rows) {
  return {m.view().data() + first * m.vocab(), num_rows, m.vocab()};
}

// The k most probable tokens of a row (ties to the lower id), by a partial
// sort of a reused index buffer.
class TopK {
 public:
  std::span<const TokenId> operator()(std::span<const float> row, std::int32_t k) {
    index_.resize(row.size());
    std::iota(index_.begin(), index_.end(), TokenId{0});
    const auto mid = index_.begin() + k;
    std::partial_sort(index_.begin(), mid, index_.end(), [&](TokenId a, TokenId b) {
      return row[static_cast<std::size_t>(a)] > row[static_cast<std::size_t>(b)] ||
             (row[static_cast<std::size_t>(a)] == row[static_cast<std::size_t>(b)] && a < b);
    });
    return {index_.data(), static_cast<std::size_t>(k)};
  }

 private:
  std::vector<TokenId> index_;
};

// Breadth-first tree of num_nodes nodes: slots in index order (root first) get
// `width` children each, the top-`width` tokens of their draft row
// (kDeterministic). width 1 gives the greedy-drafted chain.
inline void build_topk_tree(DraftTree& tree, const ProbRows& draft, std::int32_t num_nodes,
                            std::int32_t width, TopK& top_k) {
  tree.clear(kRootToken);
  for (std::int32_t slot = DraftTree::kRoot; tree.size() < num_nodes; ++slot) {
    const auto row = draft.row(slot + 1);
    for (TokenId x : top_k(row, std::min(width, num_nodes - tree.size())))
      tree.add_node(slot, x, row[static_cast<std::size_t>(x)]);
    tree.set_children_source(slot, slot + 1, ChildMode::kDeterministic);
  }
}

// The same shape with i.i.d. children: `width` draws from each slot's draft
// row (kSampledWithReplacement; duplicates stay). width 1 gives the sampled chain.
inline void build_sampled_tree(DraftTree& tree, const ProbRows& draft, std::int32_t num_nodes,
                               std::int32_t width, RandomStream& rng) {
  tree.clear(kRootToken);
  for (std::int32_t slot = DraftTree::kRoot; tree.size() < num_nodes; ++slot) {
    const auto row = draft.row(slot + 1);
    const std::int32_t k = std::min(width, num_nodes - tree.size());
    for (std::int32_t j = 0; j < k; ++j) {
      const TokenId x = row_math::sample_row(row.data(), draft.vocab(), rng.uniform());
      tree.add_node(slot, x, row[static_cast<std::size_t>(x)]);
    }
    tree.set_children_source(slot, slot + 1, ChildMode::kSampledWithReplacement);
  }
}

enum class Children { kTopK, kSampled };

// One verification input: a tree and the target and draft rows of its slots.
struct VerifyInput {
  ProbRows target;  // [num_nodes + 1, vocab]
  ProbRows draft;   // [num_nodes + 1, vocab]
  DraftTree tree;
};

// kInstances inputs of one configuration, built once per process.
inline const std::vector<VerifyInput>& verify_inputs(std::int64_t vocab, std::int32_t num_nodes,
                                                     std::int32_t width, Children children) {
  using Key = std::tuple<std::int64_t, std::int32_t, std::int32_t, Children>;
  static std::map<Key, std::vector<VerifyInput>> cache;
  const Key key{vocab, num_nodes, width, children};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const RowPool& pool = row_pool(vocab);
  std::vector<VerifyInput> inputs;
  TopK top_k;
  RandomStream rng(kSeed, /*stream=*/1);
  for (std::int32_t k = 0; k < kInstances; ++k) {
    VerifyInput in{window(pool.target, k, num_nodes + 1), window(pool.draft, k, num_nodes + 1),
                   DraftTree(kRootToken)};
    if (children == Children::kTopK)
      build_topk_tree(in.tree, in.draft, num_nodes, width, top_k);
    else
      build_sampled_tree(in.tree, in.draft, num_nodes, width, rng);
    inputs.push_back(std::move(in));
  }
  return cache.emplace(key, std::move(inputs)).first->second;
}

}  // namespace specdec::bench
