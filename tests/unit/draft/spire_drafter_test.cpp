// Tests of SpireDrafter (include/specdec/draft/spire_drafter.hpp) over a host
// head: the requests of a batch draft in one head step per level, the
// target's rows of each commit become the head's memory, and a round that is
// not a chain, or rows that do not match the commit, are typed errors.
#include "specdec/draft/spire_drafter.hpp"

#include <cstdint>
#include <span>
#include <vector>

#include "specdec/concepts.hpp"
#include "support/catch.hpp"
#include "support/fake_spire_head.hpp"

namespace sd = specdec;
namespace st = specdec::testing;

namespace {

using Drafter = sd::SpireDrafter<st::FakeSpireHead>;
static_assert(sd::Drafter<Drafter> && sd::FeatureDrafter<Drafter> && sd::BatchDrafter<Drafter>);

constexpr std::int64_t kVocab = 9;

// The target's rows of n positions (two floats each, as the fake head reads).
void hand_rows(Drafter& d, std::int64_t n, float value) {
  std::vector<float> rows(static_cast<std::size_t>(2 * n), value);
  d.target_features().assign(rows.data(), n, 2);
}

}  // namespace

TEST_CASE("SPIRe drafters draft a batch's chains in one head step per level", "[draft][spire]") {
  st::FakeSpireHead head(kVocab, 2);
  std::vector<Drafter> drafters;
  drafters.reserve(3);
  for (std::int32_t seq = 0; seq < 3; ++seq) drafters.emplace_back(head, seq);
  const std::vector<std::vector<sd::TokenId>> prompts{{1, 2, 3}, {4, 5}, {6}};
  std::vector<sd::DraftTree> trees;
  for (std::size_t i = 0; i < drafters.size(); ++i) {
    hand_rows(drafters[i], static_cast<std::int64_t>(prompts[i].size()) - 1, static_cast<float>(i));
    drafters[i].begin(prompts[i]);
    trees.emplace_back(prompts[i].back());
  }
  std::vector<Drafter*> all{&drafters[0], &drafters[1], &drafters[2]};
  std::vector<sd::ProbMatrix> rows(3, sd::ProbMatrix(0, kVocab));
  std::vector<sd::ProbMatrix*> out{&rows[0], &rows[1], &rows[2]};
  const std::int32_t root = sd::DraftTree::kRoot;
  std::vector<sd::DraftRequest> at_root;
  for (const auto& t : trees) at_root.push_back({&t, std::span(&root, 1)});
  Drafter::propose_batch(all, at_root, out);
  CHECK(head.steps() == 1);
  std::vector<std::int32_t> first(3);
  std::vector<sd::DraftRequest> level;
  for (std::size_t i = 0; i < trees.size(); ++i) {
    first[i] = trees[i].add_node(sd::DraftTree::kRoot, 7, 0.5f);
    level.push_back({&trees[i], std::span(&first[i], 1)});
  }
  Drafter::propose_batch(all, level, out);
  CHECK(head.steps() == 2);
  for (const auto& r : rows) CHECK(r.num_rows() == 2);
  // Drafter 0 accepts its draft (rows of the root and the draft), drafter 1
  // none (the root's row); the next round's root is the bonus.
  hand_rows(drafters[0], 2, 9.0f);
  drafters[0].commit(std::vector<sd::TokenId>{7, 8});
  hand_rows(drafters[1], 1, 9.0f);
  drafters[1].commit(std::vector<sd::TokenId>{3});
  sd::DraftTree next(8);
  sd::ProbMatrix more(0, kVocab);
  drafters[0].propose({&next, std::span(&root, 1)}, more);  // at position 5: the head checks it
  CHECK(head.steps() == 3);
  for (auto& d : drafters) d.end();
}

TEST_CASE("A SPIRe drafter refuses trees and commits without the target's rows", "[draft][spire]") {
  st::FakeSpireHead head(kVocab, 2);
  Drafter d(head, 0);
  hand_rows(d, 2, 1.0f);
  d.begin(std::vector<sd::TokenId>{1, 2, 3});
  sd::DraftTree tree(3);
  const auto a = tree.add_node(sd::DraftTree::kRoot, 4, 0.5f), b = tree.add_node(sd::DraftTree::kRoot, 5, 0.5f);
  sd::ProbMatrix rows(0, kVocab);
  const std::int32_t root = sd::DraftTree::kRoot;
  const std::vector<std::int32_t> both{a, b};
  CHECK_THROWS_AS(d.propose({&tree, both}, rows), sd::InvalidArgumentError);  // two slots in one step
  CHECK_THROWS_AS(d.propose({&tree, std::span(&a, 1)}, rows), sd::InvalidArgumentError);  // before the root
  d.propose({&tree, std::span(&root, 1)}, rows);
  d.propose({&tree, std::span(&a, 1)}, rows);
  CHECK_THROWS_AS(d.propose({&tree, std::span(&b, 1)}, rows), sd::InvalidArgumentError);  // a sibling: not a chain
  hand_rows(d, 1, 1.0f);
  CHECK_THROWS_AS(d.commit(std::vector<sd::TokenId>{4, 6}), sd::ShapeError);  // two tokens, one row
  sd::DraftTree wrong_root(9);
  Drafter fresh(head, 1);
  hand_rows(fresh, 0, 0.0f);
  fresh.begin(std::vector<sd::TokenId>{2});
  CHECK_THROWS_AS(fresh.propose({&wrong_root, std::span(&root, 1)}, rows), sd::InvalidArgumentError);
}
