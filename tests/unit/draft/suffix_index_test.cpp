// Tests of SuffixDecoding's pieces (arXiv 2411.04975): the suffix index's
// counts against a brute-force count of substrings (random sequences, every
// depth), matching, removal back to an empty index (bounded memory), the
// speculation tree's bounds (factor x match length, the token cap, the
// minimum probability, best first), the global cache's eviction, and the
// drafter and builder that the method composes.
#include "specdec/draft/suffix_index.hpp"

#include <cstdint>
#include <iterator>
#include <map>
#include <random>
#include <span>
#include <vector>

#include "specdec/draft/suffix_drafter.hpp"
#include "specdec/tree/suffix_tree_builder.hpp"
#include "support/catch.hpp"
#include "support/exceptions.hpp"

namespace sd = specdec;
using sd::TokenId;

namespace {

// Occurrences of `s` in the sequences, as substrings.
std::int64_t brute_count(const std::vector<std::vector<TokenId>>& seqs, const std::vector<TokenId>& s) {
  std::int64_t n = 0;
  for (const auto& q : seqs)
    for (std::size_t i = 0; i + s.size() <= q.size(); ++i)
      if (std::equal(s.begin(), s.end(), q.begin() + static_cast<std::ptrdiff_t>(i))) ++n;
  return n;
}

std::vector<TokenId> random_tokens(std::mt19937& rng, std::size_t n, TokenId vocab) {
  std::uniform_int_distribution<TokenId> tok(0, vocab - 1);
  std::vector<TokenId> v(n);
  for (auto& t : v) t = tok(rng);
  return v;
}

}  // namespace

TEST_CASE("SuffixIndex counts every substring up to its depth, appended in pieces", "[suffix]") {
  std::mt19937 rng(7);
  for (const std::int32_t depth : {2, 3, 5}) {
    sd::SuffixIndex index(depth);
    std::vector<std::vector<TokenId>> seqs(3);
    for (int step = 0; step < 30; ++step) {
      const auto s = static_cast<std::int32_t>(rng() % 3);
      const auto piece = random_tokens(rng, 1 + rng() % 4, 3);
      index.extend(s, piece);
      seqs[static_cast<std::size_t>(s)].insert(seqs[static_cast<std::size_t>(s)].end(), piece.begin(),
                                               piece.end());
    }
    // continuations() of every short pattern gives count(pattern + t) / count(pattern).
    for (int trial = 0; trial < 200; ++trial) {
      const auto pattern = random_tokens(rng, 1 + rng() % static_cast<unsigned>(depth - 1), 3);
      const auto [node, len] = index.match(pattern);
      // the longest suffix with a continuation
      std::int32_t want = 0;
      for (std::size_t l = pattern.size(); l > 0; --l) {
        const std::vector<TokenId> suffix(pattern.end() - static_cast<std::ptrdiff_t>(l), pattern.end());
        bool continued = false;
        for (TokenId t = 0; t < 3 && !continued; ++t) {
          auto ext = suffix;
          ext.push_back(t);
          continued = brute_count(seqs, ext) > 0;
        }
        if (continued) {
          want = static_cast<std::int32_t>(l);
          break;
        }
      }
      REQUIRE(len == want);
      if (len == 0) continue;
      const std::vector<TokenId> matched(pattern.end() - len, pattern.end());
      for (const auto& [t, p] : index.continuations(pattern)) {
        auto ext = matched;
        ext.push_back(t);
        CHECK(p == Approx(double(brute_count(seqs, ext)) / double(brute_count(seqs, matched))));
      }
    }
  }
}

TEST_CASE("Removing every sequence empties the SuffixIndex, whatever the order", "[suffix]") {
  std::mt19937 rng(3);
  sd::SuffixIndex index(8);
  for (std::int32_t s = 0; s < 6; ++s) index.extend(s, random_tokens(rng, 40, 4));
  CHECK(index.num_nodes() > 1);
  CHECK(index.num_tokens() == 240);
  for (const std::int32_t s : {3, 0, 5, 1, 4, 2}) index.remove(s);
  CHECK(index.num_nodes() == 1);  // the root alone
  CHECK(index.num_tokens() == 0);
  CHECK(index.match(std::vector<TokenId>{1, 2}).second == 0);
  CHECK_THROWS_AS(index.remove(0), sd::InvalidArgumentError);
  // Memory is bounded by depth x tokens held; freed nodes are reused.
  index.extend(9, random_tokens(rng, 100, 50));
  CHECK(index.num_nodes() <= 1 + 8 * 100);
}

TEST_CASE("Interleaved appends and removals keep the SuffixIndex equal to its sequences' substrings",
          "[suffix]") {
  // Thousands of edges, so that the edge table grows and its runs collide,
  // with removals (backward-shift deletion) among the appends.
  std::mt19937 rng(11);
  const std::int32_t depth = 6;
  sd::SuffixIndex index(depth);
  std::map<std::int32_t, std::vector<TokenId>> live;
  std::int32_t next = 0;
  for (int step = 0; step < 400; ++step) {
    if (!live.empty() && rng() % 4 == 0) {
      auto it = live.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(rng() % live.size()));
      index.remove(it->first);
      live.erase(it);
    } else {
      const std::int32_t s = live.empty() || rng() % 3 == 0 ? next++ : live.begin()->first;
      const auto piece = random_tokens(rng, 1 + rng() % 12, 12);
      index.extend(s, piece);
      live[s].insert(live[s].end(), piece.begin(), piece.end());
    }
  }
  REQUIRE(live.size() > 3);
  std::vector<std::vector<TokenId>> seqs;
  std::int64_t held = 0;
  for (const auto& [s, tokens] : live) {
    seqs.push_back(tokens);
    held += static_cast<std::int64_t>(tokens.size());
  }
  CHECK(index.num_tokens() == held);
  // One node per distinct substring of up to depth tokens, the root included:
  // nodes of removed text are all freed, none of the live text's.
  std::map<std::vector<TokenId>, int> distinct;
  for (const auto& q : seqs)
    for (std::size_t i = 0; i < q.size(); ++i)
      for (std::size_t l = 1; l <= static_cast<std::size_t>(depth) && i + l <= q.size(); ++l)
        distinct[std::vector<TokenId>(q.begin() + static_cast<std::ptrdiff_t>(i),
                                      q.begin() + static_cast<std::ptrdiff_t>(i + l))] = 1;
  CHECK(index.num_nodes() == 1 + static_cast<std::int64_t>(distinct.size()));
  for (int trial = 0; trial < 300; ++trial) {
    const auto pattern = random_tokens(rng, 1 + rng() % (depth - 1), 12);
    const auto [node, len] = index.match(pattern);
    if (len == 0) continue;
    const std::vector<TokenId> matched(pattern.end() - len, pattern.end());
    double total = 0.0;
    for (const auto& [t, p] : index.continuations(pattern)) {
      auto ext = matched;
      ext.push_back(t);
      CHECK(p == Approx(double(brute_count(seqs, ext)) / double(brute_count(seqs, matched))));
      total += p;
    }
    CHECK(total <= 1.0 + 1e-6);
  }
  for (const auto& [s, tokens] : live) index.remove(s);
  CHECK(index.num_nodes() == 1);
}

TEST_CASE("A removed sequence's text no longer predicts, the others' still does", "[suffix]") {
  sd::SuffixIndex index(6);
  index.extend(0, std::vector<TokenId>{1, 2, 3, 4});
  index.extend(1, std::vector<TokenId>{1, 2, 5});
  auto c = index.continuations(std::vector<TokenId>{9, 1, 2});
  REQUIRE(c.size() == 2);
  CHECK(c[0].second == Approx(0.5));
  index.remove(0);
  c = index.continuations(std::vector<TokenId>{9, 1, 2});
  REQUIRE(c.size() == 1);
  CHECK(c[0].first == 5);
  CHECK(c[0].second == Approx(1.0));
}

TEST_CASE("Speculation grows best first within factor x match length, the cap and the minimum probability",
          "[suffix]") {
  sd::SuffixIndex index(16);
  // After "7 8": 1 2 3 4 5 three times, 1 2 9 once.
  for (int i = 0; i < 3; ++i) index.extend(i, std::vector<TokenId>{7, 8, 1, 2, 3, 4, 5});
  index.extend(3, std::vector<TokenId>{7, 8, 1, 2, 9});
  const std::vector<TokenId> pattern{0, 7, 8};
  sd::SuffixSpeculation o{.max_tokens = 16, .factor = 4.0, .min_prob = 0.1f, .tree = true};
  auto d = index.speculate(pattern, o);
  CHECK(d.match_len == 2);
  // 1 (1.0), 2 (1.0), 3 (0.75), 4, 5 (0.75), 9 (0.25): factor 4 x 2 = 8 allows all six.
  CHECK(d.tokens == std::vector<TokenId>{1, 2, 3, 4, 5, 9});
  CHECK(d.parents == std::vector<std::int32_t>{-1, 0, 1, 2, 3, 1});
  CHECK(d.score == Approx(1.0 + 1.0 + 0.75 * 3 + 0.25));
  o.factor = 1.5;  // 3 nodes for a match of 2
  CHECK(index.speculate(pattern, o).tokens == std::vector<TokenId>{1, 2, 3});
  o.factor = 4.0;
  o.min_prob = 0.5f;
  CHECK(index.speculate(pattern, o).tokens == std::vector<TokenId>{1, 2, 3, 4, 5});
  o.min_prob = 0.1f;
  o.max_tokens = 4;
  CHECK(index.speculate(pattern, o).tokens.size() == 4);
  o.max_tokens = 16;
  o.tree = false;  // the single most likely path
  d = index.speculate(pattern, o);
  CHECK(d.tokens == std::vector<TokenId>{1, 2, 3, 4, 5});
  CHECK(d.parents == std::vector<std::int32_t>{-1, 0, 1, 2, 3});
  CHECK(index.speculate(std::vector<TokenId>{6}, o).tokens.empty());  // no match
  CHECK_THROWS_AS(index.speculate(pattern, sd::SuffixSpeculation{.max_tokens = -1}),
                  sd::InvalidArgumentError);
}

TEST_CASE("The global cache evicts the oldest responses beyond its bound", "[suffix]") {
  sd::SuffixCache cache(8, 2);
  const auto a = cache.start_response();
  cache.append(a, std::vector<TokenId>{1, 2, 3});
  const auto b = cache.start_response();
  cache.append(b, std::vector<TokenId>{4, 5, 6});
  CHECK(cache.index().num_sequences() == 2);
  const auto c = cache.start_response();  // evicts a
  cache.append(c, std::vector<TokenId>{7, 8});
  cache.append(a, std::vector<TokenId>{9});  // evicted: ignored
  CHECK(cache.index().num_sequences() == 2);
  CHECK(cache.index().match(std::vector<TokenId>{1, 2}).second == 0);
  CHECK(cache.index().match(std::vector<TokenId>{4, 5}).second == 2);
  sd::SuffixCache none(8, 0);
  CHECK(none.start_response() == -1);
}

TEST_CASE("SuffixDrafter drafts from the better index, and the builder keeps the budget", "[suffix]") {
  sd::SuffixCache cache(16, 8);
  {  // an earlier request's output
    sd::SuffixDrafter earlier(20, &cache, 16, {.max_tokens = 8});
    earlier.begin(std::vector<TokenId>{0});
    earlier.commit(std::vector<TokenId>{10, 11, 12, 13, 14, 15});
    earlier.end();
  }
  sd::SuffixDrafter d(20, &cache, 16, {.max_tokens = 8, .factor = 2.0, .min_prob = 0.1f, .tree = true});
  d.begin(std::vector<TokenId>{3, 4, 10, 11});
  // Its own prompt has "10 11" with no continuation; the global index continues it.
  auto draft = d.speculate(8);
  CHECK(draft.tokens == std::vector<TokenId>{12, 13, 14, 15});
  d.commit(std::vector<TokenId>{3, 4});  // now its own text continues "3 4": 10 11 3 4, once in two
  draft = d.speculate(8);
  CHECK(draft.match_len == 2);
  CHECK(draft.tokens == std::vector<TokenId>{10, 11, 3, 4});  // factor 2 x match 2
  CHECK(draft.score == Approx(4 * 0.5));

  sd::SuffixTreeBuilder builder;
  sd::DraftTree tree;
  sd::ProbMatrix rows;
  sd::RandomStream rng(0);
  builder.build(d, sd::DraftBudget{2, 8, 8}, 4, rng, tree, rows);  // depth 2 at most
  REQUIRE(tree.size() == 2);
  CHECK((tree.token(0) == 10 && tree.token(1) == 11 && tree.parent(1) == 0));
  CHECK(tree.children_mode(sd::DraftTree::kRoot) == sd::ChildMode::kDeterministic);
  CHECK(rows.num_rows() == 0);

  // The Drafter face: a frontier slot's row holds the frequency estimates.
  sd::ProbMatrix proposed;
  const std::vector<std::int32_t> frontier{sd::DraftTree::kRoot, 0};
  d.propose(sd::DraftRequest{&tree, frontier}, proposed);
  REQUIRE(proposed.num_rows() == 2);
  CHECK(proposed.row(0)[10] == Approx(0.5f));
  CHECK(proposed.row(1)[11] == Approx(1.0f));
  CHECK_THROWS_AS(d.commit(std::vector<TokenId>{20}), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::SuffixDrafter(20, &cache, 16, {.max_tokens = 16}), sd::InvalidArgumentError);
}
