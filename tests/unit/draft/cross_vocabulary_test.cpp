// Drafting from another vocabulary (arXiv 2502.05202): byte-exact encoding,
// the vocabulary map, SLEM's re-tokenized proposals and TLI's restricted rows,
// over small vocabularies where one string has several tokenizations and a
// draft piece ("cab") straddles target pieces ("ca" + "b").
#include <functional>
#include <string>
#include <vector>

#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/core/error.hpp"
#include "specdec/draft/intersection_drafter.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/draft/string_match_drafter.hpp"
#include "specdec/draft/vocabulary_map.hpp"
#include "specdec/engine/speculative_decoder.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/testing/hashed_context_model.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "support/catch.hpp"
#include "support/toy_vocabulary.hpp"

namespace sd = specdec;
using sd::TextVocabulary;
using sd::TokenId;
using sd::testing::toy_vocabulary;

namespace {

// An inner drafter over the draft vocabulary whose row for a slot is
// row_for(tree, slot); it records what it was begun and committed with.
struct ScriptedDrafter {
  static constexpr bool kProvidesProbs = true;
  std::int64_t vocab = 0;
  std::function<std::vector<float>(const sd::DraftTree&, std::int32_t)> row_for;
  std::vector<TokenId> begun;
  std::vector<std::vector<TokenId>> commits;
  std::vector<TokenId> roots;  // the root token of every tree proposed from

  std::int64_t vocab_size() const { return vocab; }
  void begin(std::span<const TokenId> prompt, const sd::SamplingParams& = {}) {
    begun.assign(prompt.begin(), prompt.end());
  }
  void propose(const sd::DraftRequest& request, sd::ProbMatrix& rows) {
    sd::expect_draft_vocab(rows, vocab, "ScriptedDrafter");
    roots.push_back(request.tree->root_token());
    for (const auto slot : request.frontier) {
      const auto row = row_for(*request.tree, slot);
      auto out = rows.append_row();
      std::copy(row.begin(), row.end(), out.begin());
    }
  }
  void commit(std::span<const TokenId> tokens) { commits.emplace_back(tokens.begin(), tokens.end()); }
  void end() {}
};

std::vector<float> one_hot(std::int64_t vocab, TokenId t) {
  std::vector<float> row(static_cast<std::size_t>(vocab), 0.0f);
  row[static_cast<std::size_t>(t)] = 1.0f;
  return row;
}

// The k-th drafted token is script[k] (the slot's depth in the draft chain).
ScriptedDrafter scripted(std::int64_t vocab, std::vector<TokenId> script) {
  ScriptedDrafter d;
  d.vocab = vocab;
  d.row_for = [vocab, script](const sd::DraftTree& tree, std::int32_t slot) {
    const auto depth = slot == sd::DraftTree::kRoot ? 0 : tree.depth(slot);
    return one_hot(vocab, script.at(static_cast<std::size_t>(depth)));
  };
  return d;
}

std::vector<TokenId> encode(const TextVocabulary& v, std::string_view s) {
  std::vector<TokenId> out;
  v.encode(s, out);
  return out;
}

// A chain builder's requests, one slot deeper each time: the proposals the
// drafter makes before its first all-zero row (at most `k`).
template <class D>
std::vector<TokenId> chain_of(D& drafter, TokenId root, int k) {
  sd::DraftTree tree(root);
  sd::ProbMatrix rows;
  std::vector<TokenId> chain;
  std::int32_t at = sd::DraftTree::kRoot;
  for (int i = 0; i < k; ++i) {
    const std::array<std::int32_t, 1> frontier{at};
    drafter.propose(sd::DraftRequest{&tree, frontier}, rows);
    const auto row = rows.row(rows.num_rows() - 1);
    const auto it = std::find(row.begin(), row.end(), 1.0f);
    if (it == row.end()) break;
    const auto token = static_cast<TokenId>(it - row.begin());
    chain.push_back(token);
    at = tree.add_node(at, token, 1.0f);
  }
  return chain;
}

}  // namespace

TEST_CASE("A text vocabulary encodes byte-exactly, stray bytes as byte tokens",
          "[unit][draft][cross-vocabulary]") {
  const auto v = toy_vocabulary("v", {"a", "b", "\xC3\xA9"}, 0, "\xC3\xA9z");
  CHECK(encode(v, "ab\xC3\xA9") == std::vector<TokenId>{0, 1, 2});
  // Half a character at either end: byte tokens (ids 3 and 4), the rest encoded.
  CHECK(encode(v,
               "\xA9"
               "a\xC3") == std::vector<TokenId>{4, 0, 3});
  CHECK(v.byte_token(0xC3) == 3);
  CHECK(v.byte_token('q') == sd::kNoToken);
  // A stray byte without a byte token, and text the encoder cannot spell back.
  CHECK_THROWS_AS(encode(v, "\xFF"), sd::UnsupportedError);
  CHECK_THROWS_AS(encode(v, "abq"), sd::UnsupportedError);
  // An encoder that rewrites its input (a dummy prefix) is refused.
  const TextVocabulary prefixing("p", {"a", " a"}, {TextVocabulary::Kind::kText, TextVocabulary::Kind::kText},
                                 sd::kNoToken, sd::kNoToken,
                                 [](std::string_view, std::vector<TokenId>& out) { out.push_back(1); });
  CHECK_THROWS_AS(encode(prefixing, "a"), sd::UnsupportedError);
  // One that spells more than it was given, too.
  const TextVocabulary overrunning("o", {"a", "aa"}, {TextVocabulary::Kind::kText, TextVocabulary::Kind::kText},
                                   sd::kNoToken, sd::kNoToken,
                                   [](std::string_view, std::vector<TokenId>& out) { out.assign({1, 1}); });
  CHECK_THROWS_AS(encode(overrunning, "a"), sd::UnsupportedError);
  // Inconsistent tables are refused at construction.
  CHECK_THROWS_AS(TextVocabulary("x", {"ab"}, {TextVocabulary::Kind::kByte}, sd::kNoToken, sd::kNoToken,
                                 [](std::string_view, std::vector<TokenId>&) {}),
                  sd::InvalidArgumentError);
  CHECK_THROWS_AS(TextVocabulary("x", {"a"}, {TextVocabulary::Kind::kText}, 0, sd::kNoToken,
                                 [](std::string_view, std::vector<TokenId>&) {}),
                  sd::InvalidArgumentError);
}

TEST_CASE("The vocabulary map shares same-kind same-bytes tokens and spells target text in draft tokens",
          "[unit][draft][cross-vocabulary]") {
  const auto target = toy_vocabulary("t", {"a", "b", "c", "ab", "bc", "ca", "abc", "cc"}, 2, "a");
  const auto draft = toy_vocabulary("d", {"a", "b", "c", "bc", "cab", "aa"}, 2);
  const sd::VocabularyMap map(draft, target);
  CHECK(map.shared() == 6);  // a, b, c, bc, BOS, EOS; the target's byte token "a" is not the text token "a"
  CHECK(map.to_target(3) == 4);
  CHECK(map.to_target(4) == sd::kNoToken);  // "cab"
  CHECK(map.to_draft(5) == sd::kNoToken);   // "ca"
  CHECK(map.to_draft(target.bos()) == draft.bos());
  CHECK(map.to_draft(target.eos()) == draft.eos());
  CHECK(map.to_draft(10) == sd::kNoToken);  // the byte token
  CHECK_THROWS_AS(map.to_draft(11), sd::InvalidArgumentError);

  std::vector<TokenId> out;
  // Token by token: "abc" is spelled a + bc, "ca" c + a; BOS as BOS.
  map.translate(std::vector<TokenId>{target.bos(), 6, 5, 1}, out);
  CHECK(out == std::vector<TokenId>{draft.bos(), 0, 3, 2, 0, 1});
  // Respelled as a whole: "ab" + "c" + "ab" is "abcab" = a + bc + ab -> a, bc, a, b... by longest match:
  // a, bc, a, b; token by token it would be a, b, c, a, b.
  out.clear();
  map.respell(std::vector<TokenId>{3, 2, 3}, out);
  CHECK(out == std::vector<TokenId>{0, 3, 0, 1});
  out.clear();
  map.translate(std::vector<TokenId>{3, 2, 3}, out);
  CHECK(out == std::vector<TokenId>{0, 1, 2, 0, 1});
}

TEST_CASE("SLEM proposes the target's spelling of the draft text, with or without holding back",
          "[unit][draft][cross-vocabulary][slem]") {
  const auto target = sd::testing::toy_target_vocabulary();
  const auto draft = sd::testing::toy_draft_vocabulary();
  const sd::VocabularyMap map(draft, target);
  // Drafted: cab, c, a, bc, aa = "cabcabcaa"; the target's spelling by longest
  // match is ca, bc, abc, a, a.
  sd::StringMatchDrafter slem(scripted(6, {4, 2, 0, 3, 5, 0, 0, 0, 0, 0}), map, /*hold_back=*/true);
  slem.begin(std::vector<TokenId>{0, 2});  // "ac": the draft reads a, c
  CHECK(slem.inner().begun == std::vector<TokenId>{0, 2});
  CHECK(chain_of(slem, 2, 4) == std::vector<TokenId>{5, 4, 6, 0});
  // Four proposals took five draft tokens: "cab" -> ca (b held back); "c",
  // "a" -> bc; "bc", "aa" -> abc, a (the last a held back).
  CHECK(std::vector<TokenId>(slem.drafted().begin(), slem.drafted().end()) ==
        std::vector<TokenId>{4, 2, 0, 3, 5});
  CHECK(slem.inner().roots.front() == 2);  // the draft chain grows from the draft's last token

  // The target accepted ca, bc and then emitted b: "cabcb". The draft keeps
  // its own cab, c (their bytes begin the text) and spells the rest, "b".
  slem.commit(std::vector<TokenId>{5, 4, 1});
  REQUIRE(slem.inner().commits.size() == 1);
  CHECK(slem.inner().commits[0] == std::vector<TokenId>{4, 2, 1});

  // Without holding back (the default, as the paper's implementation): "cab"
  // proposes ca and b at once, and each later draft token what it adds.
  sd::StringMatchDrafter eager(scripted(6, {4, 2, 0, 3, 5, 0, 0, 0, 0, 0}), map);
  eager.begin(std::vector<TokenId>{0, 2});
  CHECK(chain_of(eager, 2, 4) == std::vector<TokenId>{5, 1, 2, 0});
  CHECK(eager.drafted().size() == 3);
}

TEST_CASE("SLEM proposes nothing off its own path and ends the text at a drafted EOS",
          "[unit][draft][cross-vocabulary][slem]") {
  const auto target = toy_vocabulary("t", {"a", "b", "c", "ab", "bc", "ca", "abc", "cc"}, 2);
  const auto draft = toy_vocabulary("d", {"a", "b", "c", "bc", "cab", "aa"}, 2);
  const sd::VocabularyMap map(draft, target);
  sd::StringMatchDrafter slem(scripted(8, {4, draft.eos(), 0, 0}), map);
  slem.begin(std::vector<TokenId>{target.bos(), 0});
  CHECK(slem.inner().begun == std::vector<TokenId>{draft.bos(), 0});
  // "cab" then EOS: ca, then b (not held back: the text ended), then EOS.
  CHECK(chain_of(slem, 0, 6) == std::vector<TokenId>{5, 1, target.eos()});

  // A slot whose path is not the proposals gets an all-zero row.
  sd::DraftTree tree(0);
  const auto other = tree.add_node(sd::DraftTree::kRoot, 3, 1.0f);
  sd::ProbMatrix rows;
  const std::array<std::int32_t, 1> frontier{other};
  slem.propose(sd::DraftRequest{&tree, frontier}, rows);
  const auto row = rows.row(0);
  CHECK(std::count(row.begin(), row.end(), 0.0f) == static_cast<std::ptrdiff_t>(row.size()));
  // A tree rooted elsewhere is refused.
  sd::DraftTree wrong(7);
  const std::array<std::int32_t, 1> root{sd::DraftTree::kRoot};
  CHECK_THROWS_AS(slem.propose(sd::DraftRequest{&wrong, root}, rows), sd::InvalidArgumentError);
}

TEST_CASE("SLEM waits for a character split across draft tokens before spelling it",
          "[unit][draft][cross-vocabulary][slem]") {
  // The draft spells é as two byte tokens; the target has "aé" as one piece.
  const auto target = toy_vocabulary("t", {"a", "\xC3\xA9", "a\xC3\xA9"}, 0, "\xC3\xA9");
  const auto draft = toy_vocabulary("d", {"a", "b"}, 0, "\xC3\xA9");
  const sd::VocabularyMap map(draft, target);
  sd::StringMatchDrafter slem(scripted(4, {0, 2, 3, 0, 1, 1, 1, 1}), map, /*hold_back=*/true);
  slem.begin(std::vector<TokenId>{0});
  // "a", "\xC3", "\xA9", "a" -> aé, a (held back). Spelling "a\xC3" early
  // would have proposed a and lost the longer piece.
  CHECK(chain_of(slem, 0, 1) == std::vector<TokenId>{2});
  CHECK(slem.drafted().size() == 4);
}

TEST_CASE("TLI restricts the draft's rows to the shared tokens and drafts through a mirror tree",
          "[unit][draft][cross-vocabulary][tli]") {
  const auto target = sd::testing::toy_target_vocabulary();
  const auto draft = sd::testing::toy_draft_vocabulary();
  const sd::VocabularyMap map(draft, target);
  ScriptedDrafter inner;
  inner.vocab = 6;
  std::vector<sd::DraftTree> seen;
  inner.row_for = [&](const sd::DraftTree& tree, std::int32_t slot) {
    seen.push_back(tree);
    if (slot == sd::DraftTree::kRoot) return std::vector<float>{0.1f, 0.2f, 0.1f, 0.2f, 0.3f, 0.1f};
    return one_hot(6, 4);  // all on "cab", which the target lacks
  };
  sd::IntersectionDrafter tli(inner, map);
  tli.begin(std::vector<TokenId>{6});  // "abc" -> the draft's a, bc
  CHECK(tli.inner().begun == std::vector<TokenId>{0, 3});

  sd::DraftTree tree(6);
  sd::ProbMatrix rows;
  const std::array<std::int32_t, 1> root{sd::DraftTree::kRoot};
  tli.propose(sd::DraftRequest{&tree, root}, rows);
  REQUIRE(rows.vocab() == 8);
  const auto q = rows.row(0);
  // Shared mass 0.6: a, b, c, bc get 1/6, 2/6, 1/6, 2/6 of the target row.
  CHECK(q[0] == Approx(1.0 / 6));
  CHECK(q[1] == Approx(2.0 / 6));
  CHECK(q[2] == Approx(1.0 / 6));
  CHECK(q[4] == Approx(2.0 / 6));
  CHECK(q[3] + q[5] + q[6] + q[7] == 0.0f);

  // A node "bc" (target 4) is the draft's 3 in the mirror, under the draft's root.
  const auto node = tree.add_node(sd::DraftTree::kRoot, 4, q[4]);
  const std::array<std::int32_t, 1> frontier{node};
  tli.propose(sd::DraftRequest{&tree, frontier}, rows);
  REQUIRE(seen.size() == 2);
  CHECK(seen[1].root_token() == 3);
  CHECK(seen[1].token(0) == 3);
  // No mass left on shared tokens: uniform over them.
  const auto u = rows.row(1);
  CHECK(u[0] == 0.25f);
  CHECK(u[4] == 0.25f);
  CHECK(u[5] == 0.0f);

  // A node the draft cannot read ("ab") is refused with a sentence.
  tree.add_node(node, 3, 0.5f);
  const std::array<std::int32_t, 1> bad{1};
  CHECK_THROWS_AS(tli.propose(sd::DraftRequest{&tree, bad}, rows), sd::InvalidArgumentError);

  // Committed bc, ab: the draft reads bc, then a, b.
  tli.commit(std::vector<TokenId>{4, 3});
  REQUIRE(tli.inner().commits.size() == 1);
  CHECK(tli.inner().commits[0] == std::vector<TokenId>{3, 0, 1});
}

TEST_CASE("TLI over the target's own vocabulary drafts exactly as the draft model's chain does",
          "[unit][draft][cross-vocabulary][tli]") {
  // Every token shared: q' is q, and a chain following the request draws
  // from it for a sampled request (the drafter passes the request's sampling
  // on), so the outputs and the acceptance are the chain's, seed for seed.
  using Model = sd::testing::HashedContextModel;
  const auto vocabulary = sd::testing::toy_target_vocabulary();
  const sd::VocabularyMap map(vocabulary, vocabulary);
  REQUIRE(map.shared() == 8);
  const std::vector<TokenId> prompt = {3, 1, 4};
  for (const auto& sampling :
       {sd::SamplingParams{0.0f}, sd::SamplingParams{1.0f}, sd::SamplingParams{0.7f, 5, 0.95f}}) {
    INFO("temperature " << sampling.temperature);
    Model target_a(8, 11), draft_a(8, 11, 2, 2.0f, 1.0f), target_b(8, 11), draft_b(8, 11, 2, 2.0f, 1.0f);
    sd::ModelVerifier<Model> verifier_a(target_a), verifier_b(target_b);
    sd::ModelDrafter<Model> chain(draft_a, 0);
    sd::IntersectionDrafter tli(sd::ModelDrafter<Model>(draft_b, 0), map);
    sd::SpeculativeDecoder chain_decoder(chain, sd::ChainBuilder{}, verifier_a,
                                         sd::RecursiveRejectionSampling{}, sd::FixedLength::chain(4));
    sd::SpeculativeDecoder tli_decoder(tli, sd::ChainBuilder{}, verifier_b, sd::RecursiveRejectionSampling{},
                                       sd::FixedLength::chain(4));
    std::int64_t accepted = 0;
    for (std::uint64_t seed = 0; seed < 50; ++seed) {
      sd::GenerationOptions o;
      o.max_new_tokens = 24;
      o.sampling = sampling;
      o.sampling.seed = seed;
      const auto a = chain_decoder.generate(prompt, o), b = tli_decoder.generate(prompt, o);
      CHECK(a.tokens == b.tokens);
      CHECK(a.stats.acceptance.num_accepted == b.stats.acceptance.num_accepted);
      accepted += a.stats.acceptance.num_accepted;
    }
    CHECK(accepted > 0);
  }
}
