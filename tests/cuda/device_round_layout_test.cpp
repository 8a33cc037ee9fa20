// cuda::DeviceRoundLayout: where a round's forward rows go, each row's
// sampling, each tree's stream, the one-copy blob, and the decoding of the
// kernels' outputs into the host rules' VerifyResult (host code; no device).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/cuda/device_round_layout.hpp"
#include "support/catch.hpp"
#include "support/random_tree.hpp"

namespace sd = specdec;

namespace {

template <class T>
std::vector<T> read(std::span<const std::byte> blob, std::size_t offset, std::size_t n) {
  std::vector<T> out(n);
  if (n > 0) std::memcpy(out.data(), blob.data() + offset, n * sizeof(T));
  return out;
}

// The results blob a kernel would write for `results` (paths padded with -1).
std::vector<std::byte> results_blob(const sd::cuda::DeviceRoundLayout& layout,
                                    const std::vector<sd::VerifyResult>& results,
                                    const std::vector<std::int32_t>& used) {
  const auto r = layout.result_offsets();
  std::vector<std::byte> blob(r.bytes);
  const auto put = [&](std::size_t offset, std::size_t index, auto value) {
    std::memcpy(blob.data() + offset + index * sizeof(value), &value, sizeof(value));
  };
  const auto width = static_cast<std::size_t>(layout.path_width());
  for (std::size_t b = 0; b < results.size(); ++b) {
    for (std::size_t d = 0; d < width; ++d)
      put(r.accepted_nodes, b * width + d,
          d < results[b].accepted_nodes.size() ? results[b].accepted_nodes[d] : std::int32_t{-1});
    put(r.num_accepted, b, results[b].num_accepted());
    put(r.emitted, b, results[b].bonus_token);
    put(r.draws_used, b, used[b]);
  }
  return blob;
}

}  // namespace

TEST_CASE(
    "DeviceRoundLayout maps ragged forward rows to padded rows, with each request's sampling and stream",
    "[unit]") {
  sd::DraftTree chain, tree, empty;
  chain.clear(3);
  chain.add_node(sd::DraftTree::kRoot, 4, 0.5f);
  chain.add_node(0, 5, 0.5f);
  tree.clear(3);
  tree.add_node(sd::DraftTree::kRoot, 1, 0.5f);
  tree.add_node(sd::DraftTree::kRoot, 2, 0.3f);
  tree.add_node(1, 6, 1.0f);
  empty.clear(3);
  sd::SamplingParams greedy, hot;
  greedy.temperature = 0.0f;
  hot.temperature = 0.8f;
  hot.top_k = 20;
  hot.top_p = 0.9f;
  const std::vector<sd::cuda::DeviceRoundItem> items = {
      {&chain, greedy, {11, 21, 31}}, {&tree, hot, {12, 22, 32}}, {&empty, hot, {13, 23, 33}}};
  const sd::cuda::DeviceRoundLayout layout(items);

  CHECK(layout.batch() == 3);
  CHECK(layout.trees().nodes() == 3);
  CHECK(layout.forward_rows() == 3 + 4 + 1);
  CHECK(layout.padded_rows() == 3 * 4);
  CHECK(layout.first_row(0) == 0);
  CHECK(layout.first_row(1) == 3);
  CHECK(layout.first_row(2) == 7);
  // Tree b's slot s lands at b * (nodes + 1) + s + 1.
  CHECK(layout.out_rows() == std::vector<std::int32_t>{0, 1, 2, 4, 5, 6, 7, 8});
  REQUIRE(layout.row_params().size() == 8);
  for (std::size_t r = 0; r < 3; ++r) CHECK(layout.row_params()[r].temperature == 0.0f);
  for (std::size_t r = 3; r < 8; ++r) {
    CHECK(layout.row_params()[r].temperature == 0.8f);
    CHECK(layout.row_params()[r].top_k == 20);
    CHECK(layout.row_params()[r].top_p == 0.9f);
  }
  REQUIRE(layout.streams().size() == 3);
  CHECK(layout.streams()[1].seed == 12);
  CHECK(layout.streams()[1].stream == 22);
  CHECK(layout.streams()[1].offset == 32);

  // The blob holds each array at its 16-byte aligned offset.
  const auto blob = layout.blob();
  const auto& o = layout.offsets();
  for (const std::size_t at : {o.parents, o.tokens, o.draws, o.sizes, o.out_rows, o.params, o.streams})
    CHECK(at % 16 == 0);
  CHECK(o.bytes == blob.size());
  CHECK(read<std::int32_t>(blob, o.parents, 9) == layout.trees().parents());
  CHECK(read<sd::TokenId>(blob, o.tokens, 9) == layout.trees().tokens());
  CHECK(read<std::uint8_t>(blob, o.draws, 12) == layout.trees().draws());
  CHECK(read<std::int32_t>(blob, o.sizes, 3) == std::vector<std::int32_t>{2, 3, 0});
  CHECK(read<std::int32_t>(blob, o.out_rows, 8) == layout.out_rows());
  const auto params = read<sd::cuda::RowSampling>(blob, o.params, 8);
  CHECK(params[4].top_k == 20);
  const auto streams = read<sd::PhiloxUniforms>(blob, o.streams, 3);
  CHECK(streams[2].seed == 13);
  CHECK(streams[2].offset == 33);
}

TEST_CASE("DeviceRoundLayout decodes a kernel's outputs into the host rule's VerifyResult", "[unit]") {
  // Host rule results on random mixed-mode trees, written as a kernel writes
  // them, must decode to the same result (depth_accepted included).
  std::mt19937 gen(7);
  const std::int64_t vocab = 40;
  std::vector<sd::testing::RandomTree> trees;
  std::vector<sd::cuda::DeviceRoundItem> items;
  for (int b = 0; b < 60; ++b) trees.push_back(sd::testing::random_tree(gen, vocab, 8));
  for (auto& t : trees) items.push_back({&t.tree, sd::SamplingParams{}, {1, 2, 3}});
  const sd::cuda::DeviceRoundLayout layout(items);
  std::vector<sd::VerifyResult> want;
  std::vector<std::int32_t> used;
  sd::RecursiveRejectionSampling rule;
  int ended_above_leaf = 0, at_leaf = 0;
  for (std::size_t b = 0; b < trees.size(); ++b) {
    auto& t = trees[b];
    const sd::ProbRows target(t.target_rows.data(), t.tree.size() + 1, vocab);
    sd::RandomStream rng(5, b, 0);
    want.push_back(rule.verify(t.tree, target, t.draft_matrix.view(), rng));
    used.push_back(static_cast<std::int32_t>(rng.offset()));
    (want.back().depth_accepted.empty() || want.back().depth_accepted.back() == 0 ? ended_above_leaf
                                                                                  : at_leaf)++;
  }
  CHECK(ended_above_leaf > 5);
  CHECK(at_leaf > 5);
  const auto blob = results_blob(layout, want, used);
  for (std::int32_t b = 0; b < layout.batch(); ++b) {
    sd::VerifyResult got;
    got.accepted_nodes = {99};  // decode replaces what was there
    CHECK(layout.decode(b, blob, got) == used[static_cast<std::size_t>(b)]);
    CHECK(got.accepted_nodes == want[static_cast<std::size_t>(b)].accepted_nodes);
    CHECK(got.bonus_token == want[static_cast<std::size_t>(b)].bonus_token);
    CHECK(got.depth_accepted == want[static_cast<std::size_t>(b)].depth_accepted);
  }
}

TEST_CASE("DeviceRoundLayout refuses what it cannot lay out or decode, naming it", "[unit]") {
  sd::DraftTree tree;
  tree.clear(0);
  tree.add_node(sd::DraftTree::kRoot, 1, 1.0f);
  tree.add_node(0, 2, 1.0f);
  const std::vector<sd::cuda::DeviceRoundItem> no_tree = {{nullptr, {}, {}}};
  CHECK_THROWS_AS(sd::cuda::DeviceRoundLayout(no_tree), sd::InvalidArgumentError);
  sd::SamplingParams bad;
  bad.top_p = 0.0f;
  const std::vector<sd::cuda::DeviceRoundItem> bad_sampling = {{&tree, bad, {}}};
  CHECK_THROWS_AS(sd::cuda::DeviceRoundLayout(bad_sampling), sd::InvalidArgumentError);

  const std::vector<sd::cuda::DeviceRoundItem> items = {{&tree, {}, {}}};
  const sd::cuda::DeviceRoundLayout layout(items);
  sd::VerifyResult out, refused, off_tree, ok;
  refused.bonus_token = 3;
  ok.accepted_nodes = {0, 1};
  ok.bonus_token = 3;
  off_tree.accepted_nodes = {1};  // node 1 is not a child of the root
  off_tree.bonus_token = 3;
  const auto refused_blob = [&] {
    auto blob = results_blob(layout, {refused}, {0});
    const std::int32_t minus_one = -1;
    std::memcpy(blob.data() + layout.result_offsets().num_accepted, &minus_one, sizeof minus_one);
    return blob;
  }();
  CHECK_THROWS_AS(layout.decode(0, refused_blob, out), sd::InvalidTreeError);
  CHECK_THROWS_AS(layout.decode(0, results_blob(layout, {off_tree}, {0}), out), sd::InvalidTreeError);
  CHECK_THROWS_AS(layout.decode(1, results_blob(layout, {ok}, {0}), out), sd::InvalidArgumentError);
  const auto short_blob = results_blob(layout, {ok}, {0});
  CHECK_THROWS_AS(layout.decode(0, std::span(short_blob).first(4), out), sd::ShapeError);
  CHECK(layout.decode(0, results_blob(layout, {ok}, {2}), out) == 2);
  CHECK(out.accepted_nodes == std::vector<std::int32_t>{0, 1});
  CHECK(out.depth_accepted == std::vector<std::uint8_t>{1, 1});
}

TEST_CASE("DeviceRoundLayout copies each sampled slot's draft row, wherever the drafter put it, in runs",
          "[unit]") {
  // A chain whose slot s reads row s + 1 (a chain builder's order) and a
  // tree whose slots read rows out of order, each with a deterministic slot.
  sd::DraftTree chain, tree;
  chain.clear(3);
  chain.set_children_source(sd::DraftTree::kRoot, 0, sd::ChildMode::kSampledWithReplacement);
  chain.add_node(sd::DraftTree::kRoot, 4, 0.5f);
  chain.set_children_source(0, 1, sd::ChildMode::kSampledWithReplacement);
  chain.add_node(0, 5, 0.5f);
  chain.set_children_source(1, 2, sd::ChildMode::kDeterministic);
  chain.add_node(1, 6, 0.5f);
  chain.set_children_source(2, 3, sd::ChildMode::kSampledWithReplacement);
  chain.add_node(2, 7, 0.5f);
  tree.clear(3);
  tree.set_children_source(sd::DraftTree::kRoot, 4, sd::ChildMode::kSampledWithoutReplacement);
  tree.add_node(sd::DraftTree::kRoot, 4, 0.5f);
  tree.add_node(sd::DraftTree::kRoot, 5, 0.5f);
  tree.set_children_source(1, 0, sd::ChildMode::kSampledWithReplacement);
  tree.add_node(1, 6, 0.5f);
  tree.set_children_source(0, 1, sd::ChildMode::kSampledWithReplacement);
  tree.add_node(0, 7, 0.5f);
  const std::vector<sd::cuda::DeviceRoundItem> items = {{&chain, {}, {}}, {&tree, {}, {}}};
  const sd::cuda::DeviceRoundLayout layout(items);
  REQUIRE(layout.trees().nodes() == 4);  // 5 padded rows per tree
  const auto& c = layout.draft_copies();
  REQUIRE(c.size() == 5);
  // The chain: rows 0-1 to padded 0-1 in one run; row 2 is one-hot, unread;
  // row 3 to padded 3.
  CHECK((c[0].item == 0 && c[0].source_row == 0 && c[0].padded_row == 0 && c[0].rows == 2));
  CHECK((c[1].item == 0 && c[1].source_row == 3 && c[1].padded_row == 3 && c[1].rows == 1));
  // The tree (padded rows from 5): the root's children from row 4, node 0's
  // from row 1 and node 1's from row 0, each its own run.
  CHECK((c[2].item == 1 && c[2].source_row == 4 && c[2].padded_row == 5 && c[2].rows == 1));
  CHECK((c[3].item == 1 && c[3].source_row == 1 && c[3].padded_row == 6 && c[3].rows == 1));
  CHECK((c[4].item == 1 && c[4].source_row == 0 && c[4].padded_row == 7 && c[4].rows == 1));

  // A deterministic round copies nothing; a sampled slot without a row is refused.
  sd::DraftTree greedy;
  greedy.clear(3);
  greedy.add_node(sd::DraftTree::kRoot, 4, 1.0f);
  const std::vector<sd::cuda::DeviceRoundItem> greedy_items = {{&greedy, {}, {}}};
  CHECK(sd::cuda::DeviceRoundLayout(greedy_items).draft_copies().empty());
  sd::DraftTree rowless;
  rowless.clear(3);
  rowless.set_children_source(sd::DraftTree::kRoot, -1, sd::ChildMode::kSampledWithReplacement);
  rowless.add_node(sd::DraftTree::kRoot, 4, 0.5f);
  const std::vector<sd::cuda::DeviceRoundItem> rowless_items = {{&rowless, {}, {}}};
  CHECK_THROWS_AS(sd::cuda::DeviceRoundLayout(rowless_items), sd::InvalidTreeError);
}
