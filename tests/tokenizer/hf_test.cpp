// Hugging Face tokenizer.json (BPE) on crafted files, and against our
// SentencePiece path on Llama-style conversions of the committed models.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/tokenizer/tokenizer.hpp"
#include "support/catch.hpp"
#include "tokenizer_test_util.hpp"

using namespace specdec::tokenizer;
using Catch::Matchers::Contains;
using nlohmann::json;
using specdec::TokenId;
using specdec::TokenizerError;
using tok_test::kSp;

namespace {

const std::string kData = SPECDEC_TOKENIZER_TEST_DATA;
using Ids = std::vector<TokenId>;

TokenId byte_id(int b) {
  return 3 + b;
}

// <unk> <s> </s>, 256 byte tokens, then a few pieces of "hello world".
json base_json() {
  json vocab = json::object();
  vocab["<unk>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = byte_id(b);
  }
  const std::vector<std::string> rest = {kSp,           "h",       "e",  "l",  "o",          "w",
                                         "r",           "d",       "he", "ll", kSp + "he",   "llo",
                                         kSp + "hello", kSp + "w", "or", "ld", kSp + "world"};
  for (std::size_t i = 0; i < rest.size(); ++i) vocab[rest[i]] = 259 + i;
  json merges = json::array({"h e", "l l", kSp + " he", "ll o", kSp + "he llo", kSp + " w", "o r", "l d"});
  json added = json::array();
  for (int i = 0; i < 3; ++i)
    added.push_back({{"id", i},
                     {"content", i == 0   ? "<unk>"
                                 : i == 1 ? "<s>"
                                          : "</s>"},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  json j;
  j["added_tokens"] = added;
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       json::array({{{"type", "Prepend"}, {"prepend", kSp}},
                    {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSp}}})}};
  j["pre_tokenizer"] = nullptr;
  j["decoder"] = {
      {"type", "Sequence"},
      {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", kSp}}}, {"content", " "}},
                                {{"type", "ByteFallback"}},
                                {{"type", "Fuse"}},
                                {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  j["model"] = {{"type", "BPE"},         {"dropout", nullptr}, {"unk_token", "<unk>"}, {"fuse_unk", true},
                {"byte_fallback", true}, {"vocab", vocab},     {"merges", merges}};
  return j;
}

Tokenizer load(const json& j) {
  return Tokenizer::from_hf_json(j.dump(), "crafted.json");
}

const TokenId kSpace = 259, kH = 260, kHe = 267, kLlo = 270, kHello = 271, kW = 272, kOr = 273, kLd = 274,
              kWorld = 275;

}  // namespace

TEST_CASE("tokenizer.json BPE applies merges by rank", "[unit][tokenizer]") {
  const Tokenizer t = load(base_json());
  CHECK(t.kind() == TokenizerKind::kHuggingFace);
  CHECK(t.vocab_size() == 276);
  CHECK(t.bos_id() == 1);
  CHECK(t.eos_id() == 2);
  CHECK(t.unk_id() == 0);
  CHECK(t.pad_id() == -1);
  CHECK(t.encode("hello world") == Ids{kHello, kW, kOr, kLd});
  CHECK(t.encode("hello world", true) == Ids{1, kHello, kW, kOr, kLd});
  CHECK(t.decode(Ids{1, kHello, kW, kOr, kLd, 2}) == "hello world");
  CHECK(t.encode("").empty());
  CHECK(t.piece(kHello) == kSp + "hello");
  CHECK(t.piece_to_id(kSp + "world") == kWorld);

  // The same merges written as pairs.
  json j = base_json();
  json pairs = json::array();
  for (const auto& m : j["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    pairs.push_back(json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)}));
  }
  j["model"]["merges"] = pairs;
  CHECK(load(j).encode("hello world") == Ids{kHello, kW, kOr, kLd});
}

TEST_CASE("tokenizer.json byte fallback, unknown tokens and the ByteFallback decoder", "[unit][tokenizer]") {
  const Tokenizer t = load(base_json());
  CHECK(t.encode("h\xC3\xA9") == Ids{kSpace, kH, byte_id(0xC3), byte_id(0xA9)});
  CHECK(t.decode(t.encode("h\xC3\xA9 \xF0\x9F\x98\x80")) == "h\xC3\xA9 \xF0\x9F\x98\x80");
  // Invalid UTF-8 input: each bad byte is U+FFFD first.
  CHECK(t.encode("\xFF") == Ids{kSpace, byte_id(0xEF), byte_id(0xBF), byte_id(0xBD)});
  // The decoder turns a whole invalid byte run into one U+FFFD per byte.
  CHECK(t.decode(Ids{byte_id(0x41), byte_id(0xFF), kH}) ==
        "\xEF\xBF\xBD\xEF\xBF\xBD"
        "h");
  CHECK(t.decode(Ids{byte_id(0xC3), byte_id(0xA9)}) == "\xC3\xA9");

  json j = base_json();
  j["model"]["byte_fallback"] = false;
  CHECK(load(j).encode("xyh") == Ids{kSpace, 0, kH});  // fuse_unk
  j["model"]["fuse_unk"] = false;
  CHECK(load(j).encode("xyh") == Ids{kSpace, 0, 0, kH});
  j["model"]["unk_token"] = nullptr;
  CHECK_THROWS_WITH(load(j).encode("hx"),
                    Contains("crafted.json") && Contains("cannot encode character \"x\""));
}

TEST_CASE("tokenizer.json added tokens split the raw text first", "[unit][tokenizer]") {
  const Tokenizer legacy = load(base_json());
  // The legacy Llama normalizer prepends "▁" to every segment.
  CHECK(legacy.encode("<s>hello") == Ids{1, kHello});
  CHECK(legacy.encode("hello</s>") == Ids{kHello, 2});
  CHECK(legacy.decode(Ids{1, kHello, 2, kHello}) == "hello hello");

  // Metaspace with prepend_scheme "first": only the text at offset 0.
  json j = base_json();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", kSp}, {"prepend_scheme", "first"}, {"split", false}};
  const Tokenizer first = load(j);
  CHECK(first.encode("hello world") == Ids{kHello, kW, kOr, kLd});
  CHECK(first.encode("<s>hello") == Ids{1, kHe, kLlo});

  // lstrip / rstrip absorb the whitespace around a token.
  json k = base_json();
  k["added_tokens"].push_back({{"id", 276},
                               {"content", "[X]"},
                               {"lstrip", true},
                               {"rstrip", true},
                               {"normalized", false},
                               {"special", false}});
  const Tokenizer strip = load(k);
  CHECK(strip.vocab_size() == 277);
  CHECK(strip.encode("hello  [X]  hello") == Ids{kHello, 276, kHello});
  CHECK(strip.decode(Ids{kHello, 276}) == "hello[X]");  // not special: kept
}

TEST_CASE("tokenizer.json Metaspace splitting, ignore_merges and its decoder", "[unit][tokenizer]") {
  json j = base_json();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kSp}, {"add_prefix_space", true}};
  j["decoder"] = {
      {"type", "Sequence"},
      {"decoders", json::array({{{"type", "ByteFallback"}},
                                {{"type", "Metaspace"}, {"replacement", kSp}, {"add_prefix_space", true}},
                                {{"type", "Fuse"}}})}};
  const Tokenizer t = load(j);
  CHECK(t.encode("hello world") == Ids{kHello, kW, kOr, kLd});
  CHECK(t.encode("hello  world") == Ids{kHello, kSpace, kW, kOr, kLd});
  CHECK(t.decode(Ids{kHello, kW, kOr, kLd}) == "hello world");
  j["model"]["ignore_merges"] = true;
  const Tokenizer ig = load(j);
  CHECK(ig.encode("hello world") == Ids{kHello, kWorld});
}

TEST_CASE("Unsupported or malformed tokenizer.json throws TokenizerError", "[unit][tokenizer]") {
  auto fails = [](const json& j, const std::string& what) {
    CAPTURE(what);
    CHECK_THROWS_AS(load(j), TokenizerError);
    CHECK_THROWS_WITH(load(j), Contains("crafted.json") && Contains(what));
  };
  CHECK_THROWS_WITH(Tokenizer::from_hf_json("{\"model\": [", "x.json"),
                    Contains("x.json") && Contains("not valid JSON"));
  CHECK_THROWS_WITH(Tokenizer::from_hf_json("[1, 2]", "x.json"), Contains("not an object"));
  json j = base_json();
  j["model"]["type"] = "WordPiece";
  fails(j, "unsupported model type \"WordPiece\"");
  j = base_json();
  j["model"]["type"] = "Unigram";
  fails(j, "unsupported model type \"Unigram\"");
  j = base_json();
  j.erase("model");
  fails(j, "no \"model\" object");
  j = base_json();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  fails(j, "unsupported pre_tokenizer \"ByteLevel\"");
  j = base_json();
  j["normalizer"] = {{"type", "NFKC"}};
  fails(j, "unsupported normalizer \"NFKC\"");
  j = base_json();
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", " "}};
  fails(j, "regex");
  j = base_json();
  j["decoder"] = {{"type", "ByteLevel"}};
  fails(j, "unsupported decoder \"ByteLevel\"");
  j = base_json();
  j["model"]["merges"].push_back("q z");
  fails(j, "uses a token not in the vocab");
  j = base_json();
  j["model"]["merges"].push_back("abc");
  fails(j, "is not two tokens");
  j = base_json();
  j["model"].erase("vocab");
  fails(j, "no \"vocab\"");
  j = base_json();
  j["model"]["unk_token"] = "<nope>";
  fails(j, "unk_token \"<nope>\" is not in the vocab");
  j = base_json();
  j["model"]["dropout"] = 0.1;
  fails(j, "dropout");
  // Ids that are not integers in range (a fuzzed file had 1.6e90, read
  // through a cast that is undefined behaviour).
  j = base_json();
  j["model"]["vocab"]["he"] = 1.6e90;
  fails(j, "vocab id 1.6e+90 for \"he\"");
  j = base_json();
  j["model"]["vocab"]["he"] = 267.5;
  fails(j, "vocab id 267.5");
  j = base_json();
  j["model"]["vocab"]["he"] = -1;
  fails(j, "vocab id -1");
  j = base_json();
  j["added_tokens"][0]["id"] = 1e30;
  fails(j, "added token id 1e+30");
  j = base_json();
  j["added_tokens"][0]["id"] = 18446744073709551615ull;
  fails(j, "added token id 18446744073709551615");
  j = base_json();
  j["model"]["continuing_subword_prefix"] = "##";
  fails(j, "continuing_subword_prefix");
  j = base_json();
  j["added_tokens"][0]["single_word"] = true;
  fails(j, "single_word");
  j = base_json();
  j["model"]["vocab"]["dup"] = 5;
  fails(j, "vocab id 5 used by both");
  j = base_json();
  j["model"]["vocab"] = json::array();
  fails(j, "no \"vocab\" object");
  j = base_json();
  j["model"]["vocab"]["bad"] = "seven";
  fails(j, "malformed tokenizer.json");
}

TEST_CASE("Llama-style tokenizer.json conversions agree with the SentencePiece path", "[unit][tokenizer]") {
  const auto lines = tok_test::read_lines(kData + "/heldout.txt");
  REQUIRE(lines.size() >= 2000);
  for (const char* name : {"llama_style.model", "project_style.model"}) {
    const ModelProto m = load_model_proto(kData + "/" + name);
    const Tokenizer spm = Tokenizer::from_sentencepiece(m);
    const Tokenizer legacy = Tokenizer::from_hf_json(tok_test::spm_to_hf_json(m, true));
    const Tokenizer meta = Tokenizer::from_hf_json(tok_test::spm_to_hf_json(m, false));
    CHECK(legacy.vocab_size() == spm.vocab_size());
    CHECK(legacy.bos_id() == spm.bos_id());
    CHECK(legacy.eos_id() == spm.eos_id());
    CHECK(legacy.unk_id() == spm.unk_id());
    std::size_t checked = 0, bad = 0;
    for (const auto& line : lines) {
      // Added tokens are split out of raw text by tokenizer.json, not by spm.
      if (line.find("<s>") != std::string::npos || line.find("</s>") != std::string::npos ||
          line.find("<unk>") != std::string::npos || line.find("<|tool|>") != std::string::npos)
        continue;
      ++checked;
      const auto ids = spm.encode(line);
      // Metaspace does not prepend "▁" to text that already starts with a
      // space (tokenizers' rule), where SentencePiece's dummy prefix does.
      const bool meta_ok = (line[0] == ' ' && m.normalizer_spec.add_dummy_prefix) || meta.encode(line) == ids;
      const bool ok = legacy.encode(line) == ids && meta_ok && legacy.decode(ids) == spm.decode(ids);
      if (!ok && ++bad <= 3)
        FAIL_CHECK(name << ": tokenizer.json path differs (legacy encode " << (legacy.encode(line) == ids)
                        << ", metaspace encode " << meta_ok << ", decode "
                        << (legacy.decode(ids) == spm.decode(ids)) << ") on: " << line);
    }
    INFO(name << ": " << checked << " lines");
    CHECK(checked > 2000);
    CHECK(bad == 0);
  }
}
