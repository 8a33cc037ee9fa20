// cuda::FlatTrees lays a round's trees out as the tree kernels read them
// (host code; no device needed).
#include <cstdint>
#include <vector>

#include "specdec/core/draft_tree.hpp"
#include "specdec/cuda/flat_trees.hpp"
#include "support/catch.hpp"

namespace sd = specdec;

TEST_CASE("FlatTrees pads trees to the largest and keeps each tree's parents, tokens and modes", "[unit]") {
  std::vector<sd::DraftTree> trees(3);
  // A chain of two i.i.d. drafts.
  trees[0].clear(7);
  trees[0].set_children_source(sd::DraftTree::kRoot, 0, sd::ChildMode::kSampledWithReplacement);
  trees[0].add_node(sd::DraftTree::kRoot, 4, 0.5f);
  trees[0].set_children_source(0, 1, sd::ChildMode::kSampledWithReplacement);
  trees[0].add_node(0, 5, 0.5f);
  // Two children drawn without replacement; the second has a deterministic child.
  trees[1].clear(7);
  trees[1].set_children_source(sd::DraftTree::kRoot, 0, sd::ChildMode::kSampledWithoutReplacement);
  trees[1].add_node(sd::DraftTree::kRoot, 1, 0.5f);
  trees[1].add_node(sd::DraftTree::kRoot, 2, 0.3f);
  trees[1].set_children_source(1, -1, sd::ChildMode::kDeterministic);
  trees[1].add_node(1, 3, 1.0f);
  // No drafts at all.
  trees[2].clear(7);

  const sd::cuda::FlatTrees flat(trees);
  CHECK(flat.batch() == 3);
  CHECK(flat.nodes() == 3);
  CHECK(flat.max_depth() == 2);
  CHECK(flat.sizes() == std::vector<std::int32_t>{2, 3, 0});
  CHECK(flat.parents() == std::vector<std::int32_t>{-1, 0, -1, -1, -1, 1, -1, -1, -1});
  CHECK(flat.tokens() == std::vector<sd::TokenId>{4, 5, 0, 1, 2, 3, 0, 0, 0});
  // Slot s at s + 1: tree 0 i.i.d. at the root and node 0; tree 1 without
  // replacement at the root, deterministic at node 1; nothing else.
  CHECK(flat.draws() == std::vector<std::uint8_t>{1, 1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0});
  CHECK(flat.row(0, sd::DraftTree::kRoot) == 0);
  CHECK(flat.row(1, sd::DraftTree::kRoot) == 4);
  CHECK(flat.row(1, 2) == 7);
  CHECK(flat.row(2, sd::DraftTree::kRoot) == 8);
}

TEST_CASE("FlatTrees of no trees is empty", "[unit]") {
  const sd::cuda::FlatTrees flat(std::vector<sd::DraftTree>{});
  CHECK(flat.batch() == 0);
  CHECK(flat.nodes() == 0);
  CHECK(flat.parents().empty());
  CHECK(flat.draws().empty());
}
