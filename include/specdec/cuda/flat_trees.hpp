// A round's draft trees laid out as the CUDA tree kernels take them
// (cuda::greedy_verification, cuda::recursive_rejection_sampling,
// cuda::traversal_verification): per tree, padded to the largest,
//   parents [nodes]      each node's parent, -1 for the root's children;
//                        padding -1
//   tokens  [nodes]      each node's token; padding 0
//   draws   [nodes + 1]  how each slot's children were drafted, slot s at
//                        s + 1: 0 deterministic or none, 1 i.i.d., 2 without
//                        replacement (row_math::SlotDraw)
//   sizes   [1]          the tree's own node count
// and rows [batch, nodes + 1, vocab] addressed by row(b, slot). Host code
// only: it fills host vectors for the caller to copy to the device.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/draft_tree.hpp"
#include "specdec/core/types.hpp"

namespace specdec::cuda {

class FlatTrees {
 public:
  FlatTrees() = default;
  explicit FlatTrees(std::span<const DraftTree> trees) { assign(trees); }

  void assign(std::span<const DraftTree> trees) {
    pointers_.clear();
    for (const DraftTree& t : trees) pointers_.push_back(&t);
    assign(std::span<const DraftTree* const>(pointers_));
  }
  // The same from pointers (a round's trees live in their requests).
  void assign(std::span<const DraftTree* const> trees) {
    batch_ = static_cast<std::int32_t>(trees.size());
    nodes_ = 0;
    max_depth_ = 0;
    for (const DraftTree* t : trees) {
      nodes_ = std::max(nodes_, t->size());
      max_depth_ = std::max(max_depth_, t->max_depth());
    }
    const auto n = static_cast<std::size_t>(nodes_);
    parents_.assign(trees.size() * n, -1);
    tokens_.assign(trees.size() * n, 0);
    draws_.assign(trees.size() * (n + 1), 0);
    sizes_.assign(trees.size(), 0);
    for (std::size_t b = 0; b < trees.size(); ++b) {
      const DraftTree& t = *trees[b];
      sizes_[b] = t.size();
      for (std::int32_t i = 0; i < t.size(); ++i) {
        parents_[b * n + static_cast<std::size_t>(i)] = t.parent(i);
        tokens_[b * n + static_cast<std::size_t>(i)] = t.token(i);
      }
      for (std::int32_t slot = DraftTree::kRoot; slot < t.size(); ++slot)
        draws_[b * (n + 1) + static_cast<std::size_t>(slot + 1)] = draw_code(t.children_mode(slot));
    }
  }

  std::int32_t batch() const { return batch_; }
  std::int32_t nodes() const { return nodes_; }          // the padded node count
  std::int32_t max_depth() const { return max_depth_; }  // the deepest node's depth
  const std::vector<std::int32_t>& parents() const { return parents_; }
  const std::vector<TokenId>& tokens() const { return tokens_; }
  const std::vector<std::uint8_t>& draws() const { return draws_; }
  const std::vector<std::int32_t>& sizes() const { return sizes_; }

  // The index, among [batch, nodes + 1] rows, of the row after slot `slot`
  // (DraftTree::kRoot first) of tree b.
  std::int64_t row(std::int32_t b, std::int32_t slot) const {
    return static_cast<std::int64_t>(b) * (static_cast<std::int64_t>(nodes_) + 1) + slot + 1;
  }

  static std::uint8_t draw_code(ChildMode mode) {
    return mode == ChildMode::kSampledWithReplacement      ? 1
           : mode == ChildMode::kSampledWithoutReplacement ? 2
                                                           : 0;
  }

 private:
  std::int32_t batch_ = 0, nodes_ = 0, max_depth_ = 0;
  std::vector<std::int32_t> parents_, sizes_;
  std::vector<TokenId> tokens_;
  std::vector<std::uint8_t> draws_;
  std::vector<const DraftTree*> pointers_;  // assign(span<const DraftTree>)'s
};

}  // namespace specdec::cuda
