// Tests of NgramDrafter (include/specdec/draft/ngram_drafter.hpp), prompt
// lookup decoding (docs/methods.md): every prediction of the incremental index is
// checked against a brute-force scan of the context (random contexts over small
// vocabularies, commits of 1..5 tokens, deep-slot queries), including with hash
// functions that collide; propose's rows are one-hot or all zero; bad input
// throws typed errors.
#include "specdec/draft/ngram_drafter.hpp"

#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "specdec/concepts.hpp"
#include "support/catch.hpp"
#include "support/exceptions.hpp"

namespace sd = specdec;
using sd::DraftTree;
using sd::TokenId;
using sd::testing::message_of;

static_assert(sd::Drafter<sd::NgramDrafter>, "NgramDrafter must satisfy the Drafter concept");
static_assert(!sd::NgramDrafter::kProvidesProbs, "n-gram rows are guesses, not sampled distributions");

namespace {

// Every n-gram hashes alike: each lookup must tell n-grams apart by their tokens.
struct CollidingHash {
  std::uint64_t operator()(std::uint64_t, TokenId) const { return 0; }
};
// Collides often but not always (token ids modulo 2, order-insensitive).
struct WeakHash {
  std::uint64_t operator()(std::uint64_t h, TokenId t) const { return h + static_cast<std::uint64_t>(t % 2); }
};

// The specification, as a linear scan: for n = max..min, the latest end e in
// [n, |ctx| - 1] with ctx[e-n, e) equal to the last n tokens of ctx + ext.
std::optional<sd::NgramMatch> reference_match(const std::vector<TokenId>& ctx, std::span<const TokenId> ext,
                                              std::int32_t min_n, std::int32_t max_n) {
  std::vector<TokenId> query = ctx;
  query.insert(query.end(), ext.begin(), ext.end());
  const auto q = static_cast<std::int64_t>(query.size());
  const auto s = static_cast<std::int64_t>(ctx.size());
  for (std::int32_t n = max_n; n >= min_n; --n) {
    if (q < n) continue;
    for (std::int64_t e = s - 1; e >= n; --e) {
      bool same = true;
      for (std::int64_t j = 1; j <= n && same; ++j) same = ctx[e - j] == query[q - j];
      if (same) return sd::NgramMatch{ctx[e], n, e};
    }
  }
  return std::nullopt;
}

std::vector<TokenId> random_tokens(std::mt19937& rng, std::int64_t vocab, std::int64_t count) {
  std::uniform_int_distribution<TokenId> tok(0, static_cast<TokenId>(vocab - 1));
  std::vector<TokenId> out(static_cast<std::size_t>(count));
  for (auto& t : out) t = tok(rng);
  return out;
}

void require_same(const std::optional<sd::NgramMatch>& got, const std::optional<sd::NgramMatch>& want) {
  REQUIRE(got.has_value() == want.has_value());
  if (got) {
    REQUIRE(got->token == want->token);
    REQUIRE(got->ngram == want->ngram);
    REQUIRE(got->end == want->end);
  }
}

// Many random sequences: begin with a prompt (sometimes empty), commit 1..5
// tokens at a time, and after each commit compare queries with extensions of
// 0..6 tokens against the scan. Returns the number of queries that matched.
template <class Hash>
std::int64_t compare_with_scan(std::uint32_t seed, int num_sequences) {
  std::mt19937 rng(seed);
  std::int64_t num_queries = 0, num_matched = 0;
  for (int s = 0; s < num_sequences; ++s) {
    const std::int64_t vocab = std::uniform_int_distribution<std::int64_t>(1, 8)(rng);
    const std::int32_t min_n = std::uniform_int_distribution<std::int32_t>(1, 3)(rng);
    const std::int32_t max_n = min_n + std::uniform_int_distribution<std::int32_t>(0, 3)(rng);
    sd::BasicNgramDrafter<Hash> drafter(vocab, min_n, max_n);
    std::vector<TokenId> ctx =
        random_tokens(rng, vocab, std::uniform_int_distribution<std::int64_t>(0, 20)(rng));
    drafter.begin(ctx);
    const int num_commits = std::uniform_int_distribution<int>(1, 40)(rng);
    for (int c = 0; c < num_commits; ++c) {
      const auto tokens = random_tokens(rng, vocab, std::uniform_int_distribution<std::int64_t>(1, 5)(rng));
      drafter.commit(tokens);
      ctx.insert(ctx.end(), tokens.begin(), tokens.end());
      REQUIRE(std::vector<TokenId>(drafter.context().begin(), drafter.context().end()) == ctx);
      for (int k = 0; k < 3; ++k) {
        const auto ext = random_tokens(rng, vocab, std::uniform_int_distribution<std::int64_t>(0, 6)(rng));
        const auto want = reference_match(ctx, ext, min_n, max_n);
        require_same(drafter.find_match(ext), want);
        REQUIRE(drafter.predict(ext) == (want ? std::optional<TokenId>(want->token) : std::nullopt));
        ++num_queries;
        num_matched += want ? 1 : 0;
      }
    }
  }
  REQUIRE(num_queries > 1000);
  return num_matched;
}

// A random tree of `num_nodes` nodes under `root`, tokens in [0, vocab).
DraftTree random_tree(std::mt19937& rng, TokenId root, std::int64_t vocab, std::int32_t num_nodes) {
  DraftTree t(root);
  std::uniform_int_distribution<TokenId> tok(0, static_cast<TokenId>(vocab - 1));
  for (std::int32_t i = 0; i < num_nodes; ++i) {
    const std::int32_t parent = std::bernoulli_distribution(0.6)(rng) && i > 0
                                    ? i - 1
                                    : std::uniform_int_distribution<std::int32_t>(-1, i - 1)(rng);
    t.add_node(parent, tok(rng), 1.0f);
  }
  return t;
}

bool all_zero(std::span<const float> row) {
  for (float x : row)
    if (x != 0.0f) return false;
  return true;
}

}  // namespace

TEST_CASE("ngram drafter predictions equal a brute-force scan of the context", "[unit][draft]") {
  const auto matched = compare_with_scan<sd::NgramHash>(20240601u, 200);
  REQUIRE(matched > 500);  // the comparison exercised both outcomes
}

TEST_CASE("ngram drafter predictions stay exact when every n-gram hash collides", "[unit][draft]") {
  compare_with_scan<CollidingHash>(7u, 60);
  compare_with_scan<WeakHash>(8u, 60);
}

TEST_CASE("ngram drafter predicts the token after the most recent occurrence", "[unit][draft]") {
  sd::NgramDrafter d(10, 1, 2);
  const std::vector<TokenId> ctx{1, 2, 3, 1, 2, 4, 1, 2};
  d.begin(ctx);
  // HF's left-to-right scan would copy 3 (the first occurrence); the latest gives 4.
  REQUIRE(d.predict() == 4);
  const auto m = d.find_match();
  REQUIRE(m.has_value());
  REQUIRE(m->ngram == 2);
  REQUIRE(m->end == 5);
}

TEST_CASE("ngram drafter prefers the longest matching n-gram", "[unit][draft]") {
  sd::NgramDrafter d(10, 1, 3);
  d.begin(std::vector<TokenId>{5, 1, 2, 3, 6, 1, 2, 7, 5, 1, 2});
  // [5 1 2] matched earlier (-> 3) beats the more recent [1 2] (-> 7).
  REQUIRE(d.predict() == 3);
  REQUIRE(d.find_match()->ngram == 3);
  sd::NgramDrafter short_only(10, 1, 2);
  short_only.begin(std::vector<TokenId>{5, 1, 2, 3, 6, 1, 2, 7, 5, 1, 2});
  REQUIRE(short_only.predict() == 7);
}

TEST_CASE("ngram drafter never returns the occurrence that ends the context", "[unit][draft]") {
  sd::NgramDrafter d(10, 1, 1);
  d.begin(std::vector<TokenId>{1, 2});
  REQUIRE_FALSE(d.predict().has_value());  // the only 2 is the last token: no successor
  d.commit(std::vector<TokenId>{2});
  REQUIRE(d.predict() == 2);  // [1 2 2]: the 2 at index 1 was followed by 2
  sd::NgramDrafter e(10, 1, 3);
  e.begin(std::vector<TokenId>{4});
  REQUIRE_FALSE(e.predict().has_value());
  e.begin({});
  REQUIRE_FALSE(e.predict().has_value());
}

TEST_CASE("ngram drafter indexes every token of a multi-token commit", "[unit][draft]") {
  sd::NgramDrafter d(10, 2, 2);
  d.begin(std::vector<TokenId>{1});
  d.commit(std::vector<TokenId>{2, 3, 9, 1, 2});
  REQUIRE(d.predict() == 3);
  d.commit(std::vector<TokenId>{8, 1, 2});
  REQUIRE(d.predict() == 8);
  // A deep query: [.. 9] + path [1 2] matches the 2-gram [1 2] -> 8 as well;
  // path [2 3] needs [2 3], seen once -> 9.
  REQUIRE(d.predict(std::vector<TokenId>{1, 2}) == 8);
  REQUIRE(d.predict(std::vector<TokenId>{2, 3}) == 9);
}

TEST_CASE("ngram drafter accepts its own context as input", "[unit][draft]") {
  sd::NgramDrafter d(10, 1, 2);
  d.begin(std::vector<TokenId>{1, 2, 3});
  for (int i = 0; i < 6; ++i) d.commit(d.context());  // doubles, reallocating on the way
  REQUIRE(d.context().size() == 3 * 64);
  REQUIRE(d.predict() == 1);
  d.begin(d.context().subspan(1, 2));
  REQUIRE(std::vector<TokenId>(d.context().begin(), d.context().end()) == std::vector<TokenId>{2, 3});
}

TEST_CASE("ngram drafter begin forgets the previous sequence", "[unit][draft]") {
  sd::NgramDrafter d(10, 1, 2);
  d.begin(std::vector<TokenId>{1, 2, 1});
  REQUIRE(d.predict() == 2);
  d.begin(std::vector<TokenId>{3, 1});
  REQUIRE_FALSE(d.predict().has_value());
  REQUIRE(d.context().size() == 2);
}

TEST_CASE("ngram drafter proposes one-hot or all-zero rows equal to the scan for every slot",
          "[unit][draft]") {
  std::mt19937 rng(99);
  int num_one_hot = 0, num_zero = 0;
  for (int s = 0; s < 150; ++s) {
    const std::int64_t vocab = std::uniform_int_distribution<std::int64_t>(2, 6)(rng);
    const std::int32_t min_n = std::uniform_int_distribution<std::int32_t>(1, 2)(rng);
    const std::int32_t max_n = min_n + std::uniform_int_distribution<std::int32_t>(0, 2)(rng);
    sd::NgramDrafter d(vocab, min_n, max_n);
    std::vector<TokenId> ctx =
        random_tokens(rng, vocab, std::uniform_int_distribution<std::int64_t>(1, 30)(rng));
    d.begin(ctx);
    sd::ProbMatrix rows;  // vocab 0 on the first call: resized by propose
    for (int round = 0; round < 8; ++round) {
      const auto tree =
          random_tree(rng, ctx.back(), vocab, std::uniform_int_distribution<std::int32_t>(0, 12)(rng));
      std::vector<std::int32_t> frontier;
      for (std::int32_t i = DraftTree::kRoot; i < tree.size(); ++i)
        if (std::bernoulli_distribution(0.7)(rng)) frontier.push_back(i);
      std::shuffle(frontier.begin(), frontier.end(), rng);
      const auto before = rows.num_rows();
      d.propose(sd::DraftRequest{&tree, frontier}, rows);
      REQUIRE(rows.vocab() == vocab);
      REQUIRE(rows.num_rows() == before + static_cast<std::int64_t>(frontier.size()));
      for (std::size_t f = 0; f < frontier.size(); ++f) {
        const auto path = tree.tokens_of(tree.path_to(frontier[f]));
        const auto want = reference_match(ctx, path, min_n, max_n);
        const auto row = rows.row(before + static_cast<std::int64_t>(f));
        if (want) {
          for (std::int64_t v = 0; v < vocab; ++v) REQUIRE(row[v] == (v == want->token ? 1.0f : 0.0f));
          ++num_one_hot;
        } else {
          REQUIRE(all_zero(row));
          ++num_zero;
        }
      }
      // Commit an accepted path (maybe empty) and a bonus token, as a round would.
      const auto leaf = tree.empty() ? DraftTree::kRoot
                                     : std::uniform_int_distribution<std::int32_t>(-1, tree.size() - 1)(rng);
      auto emitted = tree.tokens_of(tree.path_to(leaf));
      emitted.push_back(random_tokens(rng, vocab, 1)[0]);
      d.commit(emitted);
      ctx.insert(ctx.end(), emitted.begin(), emitted.end());
    }
  }
  REQUIRE(num_one_hot > 500);
  REQUIRE(num_zero > 50);
}

TEST_CASE("ngram drafter rejects bad construction parameters with typed errors", "[unit][draft]") {
  using E = sd::InvalidArgumentError;
  REQUIRE_THROWS_AS(sd::NgramDrafter(0), E);
  REQUIRE_THROWS_AS(sd::NgramDrafter(-3), E);
  REQUIRE_THROWS_AS(sd::NgramDrafter(std::int64_t{1} << 32), E);
  REQUIRE_THROWS_AS(sd::NgramDrafter(10, 0, 2), E);
  REQUIRE_THROWS_AS(sd::NgramDrafter(10, 1, sd::NgramDrafter::kMaxNgramLimit + 1), E);
  const auto msg = message_of<E>([] { sd::NgramDrafter(10, 4, 2); });
  REQUIRE_THAT(msg, Catch::Contains("min_ngram = 4") && Catch::Contains("max_ngram = 2"));
  REQUIRE_NOTHROW(sd::NgramDrafter(10, 2, 2));
}

TEST_CASE("ngram drafter rejects tokens outside the vocabulary and keeps its context", "[unit][draft]") {
  sd::NgramDrafter d(5, 1, 2);
  REQUIRE_THROWS_AS(d.begin(std::vector<TokenId>{1, 5}), sd::ShapeError);
  REQUIRE_THROWS_AS(d.begin(std::vector<TokenId>{-1}), sd::ShapeError);
  d.begin(std::vector<TokenId>{1, 2, 1});
  const auto msg = message_of<sd::ShapeError>([&] { d.commit(std::vector<TokenId>{2, 7}); });
  REQUIRE_THAT(msg, Catch::Contains("token 7") && Catch::Contains("index 1") && Catch::Contains("[0, 5)"));
  REQUIRE(d.context().size() == 3);  // the failed commit appended nothing
  REQUIRE(d.predict() == 2);
}

TEST_CASE("ngram drafter rejects a tree whose root is not the last committed token", "[unit][draft]") {
  sd::NgramDrafter d(10, 1, 2);
  d.begin(std::vector<TokenId>{1, 2, 3});
  const DraftTree tree(7);
  const std::vector<std::int32_t> frontier{DraftTree::kRoot};
  sd::ProbMatrix rows;
  const auto msg = message_of<sd::InvalidArgumentError>([&] {
    d.propose(sd::DraftRequest{&tree, frontier}, rows);
  });
  REQUIRE_THAT(msg, Catch::Contains("root token 7") && Catch::Contains("last committed token 3"));
  REQUIRE(rows.num_rows() == 0);
}

TEST_CASE("ngram drafter rejects malformed requests before touching the rows", "[unit][draft]") {
  sd::NgramDrafter d(4, 1, 2);
  const std::vector<std::int32_t> root_only{DraftTree::kRoot};
  DraftTree tree(1);
  sd::ProbMatrix rows;
  SECTION("propose before any context") {
    REQUIRE_THROWS_AS(d.propose(sd::DraftRequest{&tree, root_only}, rows), sd::InvalidArgumentError);
  }
  d.begin(std::vector<TokenId>{0, 1});
  SECTION("no tree") {
    REQUIRE_THROWS_AS(d.propose(sd::DraftRequest{nullptr, root_only}, rows), sd::InvalidArgumentError);
  }
  SECTION("rows of another vocabulary") {
    rows.resize(2, 5);
    const auto msg = message_of<sd::ShapeError>([&] { d.propose(sd::DraftRequest{&tree, root_only}, rows); });
    REQUIRE_THAT(msg, Catch::Contains("vocabulary 5") && Catch::Contains("vocabulary is 4"));
    REQUIRE(rows.num_rows() == 2);
  }
  SECTION("an empty matrix of another vocabulary is reset") {
    rows.resize(0, 9);
    d.propose(sd::DraftRequest{&tree, root_only}, rows);
    REQUIRE(rows.vocab() == 4);
    REQUIRE(rows.num_rows() == 1);
  }
  SECTION("a frontier slot that is not in the tree") {
    tree.add_node(DraftTree::kRoot, 0, 1.0f);
    const std::vector<std::int32_t> frontier{DraftTree::kRoot, 0, 1};
    rows.resize(0, 4);
    REQUIRE_THROWS_AS(d.propose(sd::DraftRequest{&tree, frontier}, rows), sd::InvalidTreeError);
    REQUIRE(rows.num_rows() == 0);
  }
  SECTION("a path token outside the vocabulary") {
    const auto a = tree.add_node(DraftTree::kRoot, 6, 1.0f);
    tree.add_node(a, 0, 1.0f);
    const std::vector<std::int32_t> frontier{DraftTree::kRoot, 1};
    const auto msg = message_of<sd::ShapeError>([&] { d.propose(sd::DraftRequest{&tree, frontier}, rows); });
    REQUIRE_THAT(msg, Catch::Contains("token 6"));
    REQUIRE(rows.num_rows() == 0);
  }
}
