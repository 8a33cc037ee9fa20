// Lyanna's token-info sampling (Algorithm 1) and re-sampling (Algorithm 2)
// against a brute-force reference that computes every softmax over the full
// vocabulary with the bias added densely; the token-info table itself.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/draft/token_info_table.hpp"
#include "specdec/tree/token_info_tree.hpp"
#include "support/catch.hpp"

namespace sd = specdec;

namespace {

constexpr std::int64_t kVocab = 40;

std::vector<float> random_rows(std::int64_t rows, std::uint64_t seed, float scale = 2.0f) {
  sd::RandomStream r(seed, 1);
  std::vector<float> out(static_cast<std::size_t>(rows * kVocab));
  for (auto& v : out) v = scale * static_cast<float>(2.0 * r.uniform() - 1.0);
  return out;
}

sd::TokenInfoTable random_table(std::vector<sd::TokenId> hot, std::uint64_t seed) {
  sd::RandomStream r(seed, 2);
  std::vector<float> bias(hot.size() * hot.size());
  for (auto& b : bias) b = static_cast<float>(4.0 * r.uniform() - 2.0);
  return {kVocab, std::move(hot), std::move(bias)};
}

struct RefNode {
  sd::TokenId token;
  std::int32_t parent;
  double prob, joint;
};

// Algorithm 1 exactly as the paper writes it, dense and slow.
std::vector<RefNode> reference(const std::vector<float>& rows, std::int64_t n_rows, const sd::TokenInfoTable& table,
                               sd::TokenId root, int k) {
  std::vector<RefNode> nodes;
  std::vector<std::int32_t> q{-1};
  for (std::int64_t d = 0; d < n_rows; ++d) {
    std::vector<std::int32_t> next;
    for (const auto slot : q) {
      std::vector<float> l(rows.begin() + d * kVocab, rows.begin() + (d + 1) * kVocab);
      table.add_to(slot < 0 ? root : nodes[static_cast<std::size_t>(slot)].token, l);
      double m = *std::max_element(l.begin(), l.end()), sum = 0;
      for (const auto v : l) sum += std::exp(v - m);
      std::vector<sd::TokenId> order(kVocab);
      for (std::int64_t i = 0; i < kVocab; ++i) order[static_cast<std::size_t>(i)] = static_cast<sd::TokenId>(i);
      std::stable_sort(order.begin(), order.end(), [&](sd::TokenId a, sd::TokenId b) { return l[a] > l[b]; });
      const double parent_joint = slot < 0 ? 1.0 : nodes[static_cast<std::size_t>(slot)].joint;
      for (int j = 0; j < k; ++j) {
        const double p = std::exp(l[order[j]] - m) / sum;
        nodes.push_back({order[j], slot, p, parent_joint * p});
        next.push_back(static_cast<std::int32_t>(nodes.size()) - 1);
      }
    }
    std::stable_sort(next.begin(), next.end(), [&](std::int32_t a, std::int32_t b) {
      return nodes[static_cast<std::size_t>(a)].joint > nodes[static_cast<std::size_t>(b)].joint;
    });
    next.resize(std::min<std::size_t>(next.size(), static_cast<std::size_t>(k)));
    std::sort(next.begin(), next.end());  // expanded in creation order (the builder's node order)
    q = next;
  }
  return nodes;
}

}  // namespace

TEST_CASE("Token-info sampling builds Algorithm 1's tree", "[unit][tree][lyanna]") {
  const int k = GENERATE(1, 2, 4);
  const bool dense = GENERATE(false, true);
  const std::int64_t n_rows = 3;
  std::vector<sd::TokenId> hot;
  if (dense)
    for (sd::TokenId t = 0; t < kVocab; ++t) hot.push_back(t);
  else
    hot = {1, 4, 7, 9, 12, 15, 20, 22, 30, 33, 38};
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    INFO("k " << k << ", dense " << dense << ", seed " << seed);
    const auto rows = random_rows(n_rows, seed);
    const auto table = random_table(hot, seed);
    const sd::TokenId root = static_cast<sd::TokenId>(seed % 2 == 0 ? 4 : 5);  // hot and cold roots
    const auto ref = reference(rows, n_rows, table, root, k);
    sd::TokenInfoTreeBuilder builder(k, 1000);
    sd::DraftTree tree;
    builder.build(sd::ProbRows(rows.data(), n_rows, kVocab), table, root, tree);
    REQUIRE(tree.size() == static_cast<std::int32_t>(ref.size()));
    for (std::int32_t i = 0; i < tree.size(); ++i) {
      CHECK(tree.token(i) == ref[static_cast<std::size_t>(i)].token);
      CHECK(tree.parent(i) == ref[static_cast<std::size_t>(i)].parent);
      CHECK(tree.node(i).draft_prob == Approx(ref[static_cast<std::size_t>(i)].prob).epsilon(1e-5));
      CHECK(std::exp(tree.node(i).cum_logprob) == Approx(ref[static_cast<std::size_t>(i)].joint).epsilon(1e-5));
    }
    for (std::int32_t s = sd::DraftTree::kRoot; s < tree.size(); ++s)
      if (tree.num_children(s) > 0) CHECK(tree.children_mode(s) == sd::ChildMode::kDeterministic);
    CHECK(tree.size() == k + (n_rows - 1) * k * k);  // the paper's k + (N - 1) k^2 nodes
  }
}

TEST_CASE("Token-info sampling prunes to the B nodes of highest joint probability", "[unit][tree][lyanna]") {
  const auto rows = random_rows(3, 7);
  const auto table = random_table({0, 2, 4, 6, 8, 10}, 7);
  sd::TokenInfoTreeBuilder builder(4, 12);
  sd::DraftTree tree;
  builder.build(sd::ProbRows(rows.data(), 3, kVocab), table, 2, tree);
  const auto& pool = builder.pool();
  REQUIRE(pool.size() == 4 + 2 * 16);
  REQUIRE(tree.size() == 12);
  std::vector<double> all, kept;
  for (std::int32_t i = 0; i < pool.size(); ++i) all.push_back(pool.node(i).cum_logprob);
  for (std::int32_t i = 0; i < tree.size(); ++i) kept.push_back(tree.node(i).cum_logprob);
  std::sort(all.rbegin(), all.rend());
  std::sort(kept.rbegin(), kept.rend());
  for (std::size_t i = 0; i < kept.size(); ++i) CHECK(kept[i] == Approx(all[i]));
}

TEST_CASE("Re-sampling builds from the unused rows under the bonus token", "[unit][tree][lyanna]") {
  const std::int64_t n = 4;
  const auto rows = random_rows(n, 9);
  const auto table = random_table({1, 3, 5, 7, 9}, 9);
  sd::TokenInfoTreeBuilder builder(3, 100);
  sd::DraftTree resampled, direct;
  // One draft accepted (a = 1): the bonus sits at depth 2; rows 2..3 remain.
  REQUIRE(builder.resample(sd::ProbRows(rows.data(), n, kVocab), table, 1, 7, 0, 100, resampled));
  builder.build(sd::ProbRows(rows.data() + 2 * kVocab, 2, kVocab), table, 7, direct);
  CHECK(resampled.root_token() == 7);
  REQUIRE(resampled.size() == direct.size());
  for (std::int32_t i = 0; i < direct.size(); ++i) CHECK(resampled.token(i) == direct.token(i));
  // Threshold r: re-sample only when more than r rows remain.
  CHECK(builder.resample(sd::ProbRows(rows.data(), n, kVocab), table, 1, 7, 1, 100, resampled));
  CHECK_FALSE(builder.resample(sd::ProbRows(rows.data(), n, kVocab), table, 1, 7, 2, 100, resampled));
  CHECK(resampled.size() == 0);
  CHECK_FALSE(builder.resample(sd::ProbRows(rows.data(), n, kVocab), table, 3, 7, 0, 100, resampled));  // all used
  CHECK_THROWS_AS(builder.resample(sd::ProbRows(rows.data(), n, kVocab), table, -1, 7, 0, 100, resampled),
                  sd::InvalidArgumentError);
}

TEST_CASE("Token-info sampling rejects bad input", "[unit][tree][lyanna]") {
  CHECK_THROWS_AS(sd::TokenInfoTreeBuilder(0, 4), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::TokenInfoTreeBuilder(2, 0), sd::InvalidArgumentError);
  auto rows = random_rows(2, 3);
  rows[5] = std::numeric_limits<float>::quiet_NaN();
  sd::TokenInfoTreeBuilder builder(2, 4);
  sd::DraftTree tree;
  CHECK_THROWS_AS(builder.build(sd::ProbRows(rows.data(), 2, kVocab), sd::TokenInfoTable(), 1, tree),
                  sd::InvalidDistributionError);
  const auto other = sd::TokenInfoTable(kVocab + 1, {1}, {0.5f});
  rows[5] = 0.0f;
  CHECK_THROWS_AS(builder.build(sd::ProbRows(rows.data(), 2, kVocab), other, 1, tree), sd::ShapeError);
  // No rows (no hidden state yet): an empty tree, not an error.
  builder.build(sd::ProbRows(nullptr, 0, kVocab), sd::TokenInfoTable(), 1, tree);
  CHECK(tree.size() == 0);
}

TEST_CASE("The token-info table: hot rows and columns, frequencies", "[unit][tree][lyanna]") {
  const sd::TokenInfoTable t(6, {4, 1}, {1.0f, 2.0f, 3.0f, 4.0f});
  CHECK(t.num_hot() == 2);
  CHECK_FALSE(t.dense());
  CHECK(t.hot_index(4) == 0);
  CHECK(t.hot_index(0) == -1);
  CHECK(t.bias(0).empty());
  std::vector<float> l(6, 0.0f);
  t.add_to(1, l);  // row of token 1: column 4 += 3, column 1 += 4
  CHECK(l == std::vector<float>{0, 4, 0, 0, 3, 0});
  t.add_to(2, l);  // cold parent: unchanged
  CHECK(l == std::vector<float>{0, 4, 0, 0, 3, 0});
  CHECK(t.memory_bytes() == 16);
  CHECK(t.dense_memory_bytes() == 144);
  CHECK_THROWS_AS(sd::TokenInfoTable(6, {4, 4}, {1, 2, 3, 4}), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::TokenInfoTable(6, {4, 6}, {1, 2, 3, 4}), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::TokenInfoTable(6, {4, 1}, {1, 2, 3}), sd::ShapeError);
  CHECK_THROWS_AS(t.add_to(1, std::span(l).first(5)), sd::ShapeError);

  const std::vector<std::uint16_t> corpus = {3, 3, 1, 5, 3, 1, 0, 5, 5, 5};
  const auto counts = sd::count_tokens(corpus, 6);
  CHECK(counts == std::vector<std::int64_t>{1, 2, 0, 3, 0, 4});
  CHECK(sd::most_frequent_tokens(counts, 3) == std::vector<sd::TokenId>{5, 3, 1});
  CHECK(sd::most_frequent_tokens(counts, 6) == std::vector<sd::TokenId>{5, 3, 1, 0, 2, 4});  // ties: lower id
  CHECK_THROWS_AS(sd::most_frequent_tokens(counts, 7), sd::InvalidArgumentError);
  const std::vector<std::uint16_t> bad = {9};
  CHECK_THROWS_AS(sd::count_tokens(bad, 6), sd::InvalidArgumentError);
}
