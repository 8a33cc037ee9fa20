// SentencePiece BPE tokenizer on crafted models and on the committed
// spm_train models (libsentencepiece itself is compared in oracle_test.cpp).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/tokenizer/tokenizer.hpp"
#include "support/catch.hpp"
#include "tokenizer_test_util.hpp"

using namespace specdec::tokenizer;
using Catch::Matchers::Contains;
using specdec::TokenId;
using specdec::TokenizerError;
using tok_test::kSp;
using tok_test::ModelBuilder;

namespace {

const std::string kData = SPECDEC_TOKENIZER_TEST_DATA;

std::vector<std::string> pieces_of(const Tokenizer& t, const std::vector<TokenId>& ids) {
  std::vector<std::string> out;
  for (TokenId id : ids) out.push_back(t.piece(id));
  return out;
}

std::vector<std::string> encode_pieces(const Tokenizer& t, std::string_view text) {
  return pieces_of(t, t.encode(text));
}

using Pieces = std::vector<std::string>;

}  // namespace

TEST_CASE("BPE merges the highest-scoring pair first", "[unit][tokenizer]") {
  // bc outscores ab: "abc" -> a + bc.
  {
    ModelBuilder b;
    b.dummy_prefix(false).chars({"a", "b", "c"}).add("ab", -2.0f).add("bc", -1.0f);
    CHECK(encode_pieces(b.build(), "abc") == Pieces{"a", "bc"});
  }
  // ab outscores bc: "abc" -> ab + c.
  {
    ModelBuilder b;
    b.dummy_prefix(false).chars({"a", "b", "c"}).add("ab", -1.0f).add("bc", -2.0f);
    CHECK(encode_pieces(b.build(), "abc") == Pieces{"ab", "c"});
  }
  // Merged symbols merge again when the longer piece exists.
  {
    ModelBuilder b;
    b.dummy_prefix(false).chars({"a", "b", "c"}).add("ab", -2.0f).add("bc", -1.0f).add("abc", -3.0f);
    CHECK(encode_pieces(b.build(), "abc") == Pieces{"abc"});
    CHECK(encode_pieces(b.build(), "cabcab") == Pieces{"c", "abc", "ab"});
  }
}

TEST_CASE("BPE breaks score ties leftmost", "[unit][tokenizer]") {
  ModelBuilder b;
  b.dummy_prefix(false).chars({"a"}).add("aa", -1.0f);
  const Tokenizer t = b.build();
  CHECK(encode_pieces(t, "aaa") == Pieces{"aa", "a"});
  CHECK(encode_pieces(t, "aaaaa") == Pieces{"aa", "aa", "a"});
  // A long line is no problem (heap-based merging, not quadratic).
  const std::string long_line(200001, 'a');
  const auto ids = t.encode(long_line);
  REQUIRE(ids.size() == 100001);
  CHECK(t.piece(ids.front()) == "aa");
  CHECK(t.piece(ids.back()) == "a");
  CHECK(t.decode(ids) == long_line);
}

TEST_CASE("UNUSED pieces are intermediate merges only, split back on output", "[unit][tokenizer]") {
  ModelBuilder b;
  b.dummy_prefix(false).chars({"a", "b", "c"}).add("ab", 0.0f, PieceType::kUnused).add("abc", -1.0f);
  const Tokenizer t = b.build();
  CHECK(encode_pieces(t, "ab") == Pieces{"a", "b"});
  CHECK(encode_pieces(t, "abc") == Pieces{"abc"});
  CHECK(encode_pieces(t, "abab") == Pieces{"a", "b", "a", "b"});
}

TEST_CASE("User-defined symbols are matched first and never merged", "[unit][tokenizer]") {
  ModelBuilder b;
  b.dummy_prefix(false)
      .chars({"a", "b", "<", ">", "t"})
      .add("<t>", 0.0f, PieceType::kUserDefined)
      .add("<tt>", 0.0f, PieceType::kUserDefined)
      .add("a<", -1.0f)
      .add(">b", -1.0f);
  const Tokenizer t = b.build();
  CHECK(encode_pieces(t, "a<t>b") == Pieces{"a", "<t>", "b"});
  CHECK(encode_pieces(t, "<tt><t>") == Pieces{"<tt>", "<t>"});  // longest match
  CHECK(encode_pieces(t, "a<>b") == Pieces{"a<", ">b"});
  CHECK(t.decode(t.encode("a<t>b")) == "a<t>b");
}

TEST_CASE("Unknown characters fall back to UTF-8 byte pieces", "[unit][tokenizer]") {
  ModelBuilder b;
  b.dummy_prefix(false).chars({"a"});
  const Tokenizer t = b.build();
  CHECK(encode_pieces(t,
                      "a\xC3\xA9"
                      "a") == Pieces{"a", "<0xC3>", "<0xA9>", "a"});
  CHECK(encode_pieces(t, "\xF0\x9F\x98\x80") == Pieces{"<0xF0>", "<0x9F>", "<0x98>", "<0x80>"});
  // Invalid UTF-8: each bad byte is U+FFFD (EF BF BD) first, as in SentencePiece.
  CHECK(encode_pieces(t,
                      "\xFF"
                      "a") == Pieces{"<0xEF>", "<0xBF>", "<0xBD>", "a"});
  CHECK(encode_pieces(t, "\xE2\x82") == Pieces{"<0xEF>", "<0xBF>", "<0xBD>", "<0xEF>", "<0xBF>", "<0xBD>"});
  // A space with no piece for it: the escaped "▁" falls back to bytes.
  CHECK(encode_pieces(t, "a a") == Pieces{"a", "<0xE2>", "<0x96>", "<0x81>", "a"});
  // Byte pieces decode verbatim: the escaped space stays "▁" (as libsentencepiece).
  CHECK(t.decode(t.encode("a\xC3\xA9 \xF0\x9F\x98\x80")) == "a\xC3\xA9\xE2\x96\x81\xF0\x9F\x98\x80");
}

TEST_CASE("Without byte fallback a run of unknown characters is one <unk>", "[unit][tokenizer]") {
  ModelBuilder b(false);
  b.dummy_prefix(false).chars({"a"});
  const Tokenizer t = b.build();
  CHECK(t.encode("xy\xC3\xA9"
                 "a"
                 "z") == std::vector<TokenId>{0, 3, 0});
  CHECK(t.decode(t.encode("xya")) == " \xE2\x81\x87 a");
}

TEST_CASE("Normalization: dummy prefix, whitespace escaping and removal", "[unit][tokenizer]") {
  // Only characters and "▁": the piece sequence shows the normalized text.
  std::vector<std::string> cs = {kSp, "a", "b", "\t"};
  {
    ModelBuilder b;  // SentencePiece defaults: dummy prefix, remove extra whitespace
    b.chars(cs);
    const Tokenizer t = b.build();
    CHECK(encode_pieces(t, "  a   b  ") == Pieces{kSp, "a", kSp, "b"});
    CHECK(encode_pieces(t, "a\tb") == Pieces{kSp, "a", "\t", "b"});  // only ' ' is whitespace
    CHECK(t.encode("   ").empty());
    CHECK(t.encode("").empty());
    CHECK(t.decode(t.encode("  a   b  ")) == "a b");
  }
  {
    ModelBuilder b;  // Llama: dummy prefix, whitespace kept
    b.chars(cs).remove_extra_whitespaces(false);
    const Tokenizer t = b.build();
    CHECK(encode_pieces(t, " a  b ") == Pieces{kSp, kSp, "a", kSp, kSp, "b", kSp});
    CHECK(encode_pieces(t, " ") == Pieces{kSp, kSp});
    CHECK(t.encode("").empty());
    CHECK(t.decode(t.encode(" a  b ")) == " a  b ");
  }
  {
    ModelBuilder b;  // the project's tokenizer: neither
    b.chars(cs).remove_extra_whitespaces(false).dummy_prefix(false);
    const Tokenizer t = b.build();
    CHECK(encode_pieces(t, " a  b ") == Pieces{kSp, "a", kSp, kSp, "b", kSp});
    CHECK(t.decode(t.encode(" a  b ")) == " a  b ");
  }
}

TEST_CASE("Decode reassembles bytes, drops controls and strips the dummy prefix", "[unit][tokenizer]") {
  ModelBuilder b;
  b.remove_extra_whitespaces(false).chars({kSp, "h", "i"}).add(kSp + "hi", -1.0f);
  const Tokenizer t = b.build();
  const TokenId hi = *t.piece_to_id(kSp + "hi");
  const TokenId sp = *t.piece_to_id(kSp);
  const TokenId h = *t.piece_to_id("h");
  auto byte = [&](int v) { return static_cast<TokenId>(3 + v); };
  const std::vector<TokenId> ids1{1, hi, sp, hi, 2};
  CHECK(t.decode(ids1) == "hi  hi");
  const std::vector<TokenId> ids2{byte(0xE2), byte(0x82), byte(0xAC), hi};
  CHECK(t.decode(ids2) == "\xE2\x82\xAC hi");  // bytes first: no prefix to strip
  const std::vector<TokenId> ids3{byte(0xE2), h, byte(0xC3)};
  CHECK(t.decode(ids3) == "\xEF\xBF\xBDh\xEF\xBF\xBD");
  const std::vector<TokenId> ids4{byte(0xF0), byte(0x9F), byte(0x98)};  // truncated
  CHECK(t.decode(ids4) == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  const std::vector<TokenId> ids5{sp, hi};  // only the first piece's "▁" goes
  CHECK(t.decode(ids5) == " hi");
  const std::vector<TokenId> ids6{0, hi};
  CHECK(t.decode(ids6) == " \xE2\x81\x87  hi");
  CHECK(t.decode(std::vector<TokenId>{}).empty());

  // With remove_extra_whitespaces every leading "▁" piece is stripped.
  ModelBuilder c;
  c.chars({kSp, "h", "i"}).add(kSp + "hi", -1.0f);
  const Tokenizer u = c.build();
  const std::vector<TokenId> ids7{*u.piece_to_id(kSp), *u.piece_to_id(kSp + "hi")};
  CHECK(u.decode(ids7) == "hi");
  // Without a dummy prefix nothing is stripped.
  ModelBuilder d;
  d.dummy_prefix(false).remove_extra_whitespaces(false).chars({kSp, "h"});
  const Tokenizer v = d.build();
  const std::vector<TokenId> ids8{1, *v.piece_to_id(kSp), *v.piece_to_id("h")};
  CHECK(v.decode(ids8) == " h");

  // A custom unk surface from the trainer spec.
  ModelBuilder e(false);
  e.m.trainer_spec.unk_surface = "<?>";
  const Tokenizer w = e.build();
  CHECK(w.decode(w.encode("zz")) == "<?>");
}

TEST_CASE("Special ids, add_bos, piece lookup and range errors", "[unit][tokenizer]") {
  ModelBuilder b;
  b.chars({kSp, "a"});
  const Tokenizer t = b.build();
  CHECK(t.kind() == TokenizerKind::kSentencePiece);
  CHECK(t.vocab_size() == 3 + 256 + 2);
  CHECK(t.unk_id() == 0);
  CHECK(t.bos_id() == 1);
  CHECK(t.eos_id() == 2);
  CHECK(t.pad_id() == -1);
  CHECK(t.encode("a", true) == std::vector<TokenId>{1, 259, 260});
  CHECK(t.encode("a", false) == std::vector<TokenId>{259, 260});
  std::vector<TokenId> out{42};
  t.encode_append("a", true, out);
  CHECK(out == std::vector<TokenId>{42, 1, 259, 260});
  CHECK(t.piece(3) == "<0x00>");
  CHECK(t.piece_to_id("<s>") == 1);
  CHECK(t.piece_to_id("a") == 260);
  CHECK_FALSE(t.piece_to_id("zz").has_value());
  CHECK_THROWS_AS(t.piece(-1), TokenizerError);
  CHECK_THROWS_WITH(t.piece(t.vocab_size()), Contains("outside the vocabulary"));
  const std::vector<TokenId> bad{1, 5000};
  CHECK_THROWS_WITH(t.decode(bad), Contains("token id 5000 at position 1"));

  // A model without <s>: no BOS, and add_bos adds nothing.
  ModelBuilder c;
  c.m.pieces.erase(c.m.pieces.begin() + 1);
  c.chars({"a"}).dummy_prefix(false);
  const Tokenizer u = c.build();
  CHECK(u.bos_id() == -1);
  CHECK(u.eos_id() == 1);
  CHECK(u.encode("a", true).size() == 1);
}

TEST_CASE("Unsupported or inconsistent SentencePiece models throw TokenizerError", "[unit][tokenizer]") {
  auto fails = [](const ModelBuilder& b, const std::string& what) {
    CAPTURE(what);
    CHECK_THROWS_AS(b.build(), TokenizerError);
    CHECK_THROWS_WITH(b.build(), Contains("crafted") && Contains(what));
  };
  {
    ModelBuilder b;
    b.m.trainer_spec.model_type = ModelType::kUnigram;
    fails(b, "unsupported SentencePiece model type UNIGRAM");
    b.m.trainer_spec.model_type = ModelType::kWord;
    fails(b, "unsupported SentencePiece model type WORD");
    b.m.trainer_spec.model_type = ModelType::kChar;
    fails(b, "unsupported SentencePiece model type CHAR");
  }
  {
    ModelBuilder b;
    b.m.pieces.erase(b.m.pieces.begin());
    fails(b, "no UNKNOWN piece");
  }
  {
    ModelBuilder b;
    b.add("<unk2>", 0.0f, PieceType::kUnknown);
    fails(b, "more than one UNKNOWN piece");
  }
  {
    ModelBuilder b;
    b.chars({"a", "a"});
    fails(b, "piece 'a' is defined twice");
  }
  {
    ModelBuilder b;
    b.add("", 0.0f);
    fails(b, "is empty");
  }
  {
    ModelBuilder b(false);
    b.add("<0x41>", 0.0f, PieceType::kByte);
    fails(b, "although byte_fallback is false");
  }
  {
    ModelBuilder b;
    b.m.pieces.erase(b.m.pieces.begin() + 3 + 0x7F);
    fails(b, "byte piece <0x7F> is missing");
  }
  {
    ModelBuilder b;
    b.m.pieces[3].piece = "<0xzz>";
    fails(b, "is not of the form <0xXX>");
  }
  {
    ModelBuilder b;
    b.m.trainer_spec.treat_whitespace_as_suffix = true;
    fails(b, "treat_whitespace_as_suffix");
  }
  {
    ModelBuilder b;
    b.m.denormalizer_spec = specdec::tokenizer::NormalizerSpec{};
    b.m.denormalizer_spec->precompiled_charsmap = "abcdefgh";
    fails(b, "unsupported denormalizer");
  }
  {
    ModelBuilder b;
    b.m.normalizer_spec.precompiled_charsmap = std::string("\xff\x00\x00\x00xx", 6);
    fails(b, "bad trie size");
  }
  {
    ModelBuilder b;
    b.m.pieces.clear();
    fails(b, "no pieces");
  }
}

TEST_CASE("Tokenizer::load dispatches on the file and names it in errors", "[unit][tokenizer]") {
  const auto dir = std::filesystem::temp_directory_path() / "specdec_tokenizer_test_load";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  CHECK_THROWS_WITH(Tokenizer::load(dir / "missing.model"),
                    Contains("missing.model") && Contains("no such file"));
  CHECK_THROWS_WITH(Tokenizer::load(dir), Contains("neither tokenizer.model nor tokenizer.json"));
  auto write = [&](const std::string& name, const std::string& data) {
    std::ofstream(dir / name, std::ios::binary) << data;
    return dir / name;
  };
  CHECK_THROWS_WITH(Tokenizer::load(write("empty.model", "")), Contains("empty file"));
  CHECK_THROWS_WITH(Tokenizer::load(write("garbage.model", "\x0f\x01\x02")),
                    Contains("garbage.model") && Contains("malformed protobuf"));
  CHECK_THROWS_WITH(Tokenizer::load(write("bad.json", "{ not json")),
                    Contains("bad.json") && Contains("not valid JSON"));
  // A proper model under another name, and a directory holding tokenizer.model.
  const std::string model = tok_test::read_text(kData + "/llama_style.model");
  const Tokenizer a = Tokenizer::load(write("renamed.bin", model));
  CHECK(a.vocab_size() == 1000);
  write("tokenizer.model", model);
  const Tokenizer b = Tokenizer::load(dir);
  CHECK(b.encode("hello world") == a.encode("hello world"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("Committed spm_train models round-trip held-out text exactly", "[unit][tokenizer]") {
  const auto lines = tok_test::read_lines(kData + "/heldout.txt");
  REQUIRE(lines.size() >= 2000);
  for (const char* name : {"llama_style.model", "project_style.model"}) {
    CAPTURE(name);
    const Tokenizer t = Tokenizer::load(kData + "/" + name);
    std::size_t bad = 0, tokens = 0, bytes = 0;
    for (const auto& line : lines) {
      const auto ids = t.encode(line);
      tokens += ids.size();
      bytes += line.size();
      if (t.decode(ids) != line && ++bad <= 3) FAIL_CHECK("round trip differs: " << line);
    }
    CHECK(bad == 0);
    // A trained vocabulary compresses (1000 pieces: under 0.6 tokens per byte).
    CHECK(static_cast<double>(tokens) < 0.6 * static_cast<double>(bytes));
  }
  const Tokenizer t = Tokenizer::load(kData + "/llama_style.model");
  CHECK(t.piece_to_id("<|tool|>").has_value());
  const auto ids = t.encode("x<|tool|>y");
  CHECK(std::count(ids.begin(), ids.end(), *t.piece_to_id("<|tool|>")) == 1);
  // split_digits: every digit its own piece.
  for (TokenId id : t.encode("year 2024 and 31337"))
    if (t.piece(id).find_first_of("0123456789") != std::string::npos)
      CHECK(tok_test::utf8_chars(t.piece(id)).size() <= 2);
}

TEST_CASE("A precompiled charsmap normalizes before tokenization", "[unit][tokenizer]") {
  const Tokenizer t = Tokenizer::load(kData + "/classic_style.model");
  // Fullwidth ASCII, ligatures, ellipsis, NBSP, circled digits (make_data.sh).
  CHECK(t.encode("\xEF\xBC\xA1\xEF\xBC\xA2\xEF\xBC\xA3") == t.encode("ABC"));
  CHECK(t.encode("\xEF\xAC\x81nd") == t.encode("find"));
  CHECK(t.encode("wait\xE2\x80\xA6") == t.encode("wait..."));
  CHECK(t.encode("a\xC2\xA0\xC2\xA0"
                 "b") == t.encode("a b"));
  CHECK(t.encode("\xE2\x91\xA0\xE2\x91\xA1") == t.encode("12"));
  CHECK(t.encode("A\xCC\x80") == t.encode("\xC3\x80"));
  CHECK(t.pad_id() == 3);
  CHECK(t.piece_to_id("<ctl>").has_value());
  CHECK(t.decode(t.encode("  Hello,   World  ")) == "Hello, World");
}

TEST_CASE("A Tokenizer is safe to share between threads", "[unit][tokenizer]") {
  const Tokenizer t = Tokenizer::load(kData + "/project_style.model");
  const auto lines = tok_test::read_lines(kData + "/heldout.txt", 400);
  std::vector<std::vector<TokenId>> expected;
  for (const auto& l : lines) expected.push_back(t.encode(l));
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      const Tokenizer copy = t;  // copies share the model
      for (std::size_t i = 0; i < lines.size(); ++i)
        if (copy.encode(lines[i]) != expected[i] || copy.decode(expected[i]) != lines[i]) ++bad[k];
    });
  }
  for (auto& th : threads) th.join();
  CHECK(bad == std::vector<int>(4, 0));
}
