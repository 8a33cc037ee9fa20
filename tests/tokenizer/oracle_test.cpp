// Our tokenizer against libsentencepiece, token for token: encode and decode
// on held-out text. This binary links libsentencepiece and never libtorch
// (the two crash together at load time through their protobuf copies).
//
// Models and texts:
//  * tests/tokenizer/data: three small spm_train models and heldout.txt
//    (always present, so this always checks something real);
//  * the project tokenizer, $SPECDEC_TOKENIZER_MODEL (default
//    models/tokenizer.model, else build/tokenizer/tokenizer.model) on
//    $SPECDEC_TOKENIZER_TEXT (default build/corpus/heldout.txt, from
//    scripts/corpus/build_corpus.sh), all non-empty lines or the first
//    $SPECDEC_TOKENIZER_MAX_LINES; skipped with a warning when absent;
//  * edited variants of a committed model, written by our protobuf writer
//    and loaded by libsentencepiece from the serialized bytes.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "specdec/tokenizer/tokenizer.hpp"
#include "support/catch.hpp"
#include "tokenizer_test_util.hpp"

using specdec::TokenId;
using specdec::tokenizer::Tokenizer;

namespace {

const std::string kData = SPECDEC_TOKENIZER_TEST_DATA;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? std::string(v) : fallback;
}

std::string show(const std::vector<int>& ids, const sentencepiece::SentencePieceProcessor& sp) {
  std::ostringstream os;
  for (std::size_t i = 0; i < ids.size(); ++i) os << (i ? " " : "") << ids[i] << ":" << sp.IdToPiece(ids[i]);
  return os.str();
}

std::string escape(const std::string& s) {
  std::ostringstream os;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f)
      os << "\\x"
         << "0123456789abcdef"[u >> 4] << "0123456789abcdef"[u & 15];
    else
      os << c;
  }
  return os.str();
}

struct Report {
  std::size_t lines = 0, bytes = 0, tokens = 0;
  std::size_t encode_mismatches = 0, decode_mismatches = 0, scrambled_mismatches = 0;
  double ours_s = 0, theirs_s = 0;
};

// Checks `ours` against libsentencepiece on every line: the ids of encode,
// the text of decode(ids), and decode of a scrambled id sequence (reversed,
// with byte pieces and controls out of place) to exercise the decoder's
// corner cases. Prints the first mismatches in full.
Report compare(const Tokenizer& ours, const sentencepiece::SentencePieceProcessor& sp,
               const std::vector<std::string>& lines, const std::string& label) {
  Report r;
  int printed = 0;
  std::vector<TokenId> mine;
  std::vector<int> theirs;
  using clock = std::chrono::steady_clock;
  for (const std::string& line : lines) {
    ++r.lines;
    r.bytes += line.size();
    const auto t0 = clock::now();
    mine = ours.encode(line);
    const auto t1 = clock::now();
    theirs.clear();
    const auto status = sp.Encode(line, &theirs);
    const auto t2 = clock::now();
    r.ours_s += std::chrono::duration<double>(t1 - t0).count();
    r.theirs_s += std::chrono::duration<double>(t2 - t1).count();
    REQUIRE(status.ok());
    r.tokens += theirs.size();
    const std::vector<int> mine_int(mine.begin(), mine.end());
    if (mine_int != theirs) {
      ++r.encode_mismatches;
      if (printed++ < 5)
        FAIL_CHECK(label << ": encode mismatch on line " << r.lines << "\n  text:   " << escape(line)
                         << "\n  ours:   " << show(mine_int, sp) << "\n  libspm: " << show(theirs, sp));
    }
    std::string expected;
    REQUIRE(sp.Decode(theirs, &expected).ok());
    const std::vector<TokenId> theirs_tok(theirs.begin(), theirs.end());
    const std::string got = ours.decode(theirs_tok);
    if (got != expected) {
      ++r.decode_mismatches;
      if (printed++ < 5)
        FAIL_CHECK(label << ": decode mismatch on line " << r.lines << "\n  ids:    " << show(theirs, sp)
                         << "\n  ours:   " << escape(got) << "\n  libspm: " << escape(expected));
    }
    // Scrambled: reversed, with BOS/EOS/<unk> mixed in.
    std::vector<int> scrambled(theirs.rbegin(), theirs.rend());
    if (!scrambled.empty()) {
      scrambled.insert(scrambled.begin() + static_cast<std::ptrdiff_t>(scrambled.size() / 2),
                       {sp.bos_id() >= 0 ? sp.bos_id() : 0, sp.unk_id()});
      if (sp.eos_id() >= 0) scrambled.insert(scrambled.begin(), sp.eos_id());
    }
    std::string expected_s;
    REQUIRE(sp.Decode(scrambled, &expected_s).ok());
    const std::vector<TokenId> scrambled_tok(scrambled.begin(), scrambled.end());
    const std::string got_s = ours.decode(scrambled_tok);
    if (got_s != expected_s) {
      ++r.scrambled_mismatches;
      if (printed++ < 5)
        FAIL_CHECK(label << ": decode mismatch on scrambled ids of line " << r.lines
                         << "\n  ids:    " << show(scrambled, sp) << "\n  ours:   " << escape(got_s)
                         << "\n  libspm: " << escape(expected_s));
    }
  }
  const double mb = static_cast<double>(r.bytes) / 1e6;
  WARN(label << ": " << r.lines << " lines (" << r.bytes << " bytes, " << r.tokens
             << " tokens) checked; encode mismatches " << r.encode_mismatches << ", decode mismatches "
             << r.decode_mismatches << ", scrambled-decode mismatches " << r.scrambled_mismatches
             << "; encode throughput ours " << (r.ours_s > 0 ? mb / r.ours_s : 0.0)
             << " MB/s, libsentencepiece " << (r.theirs_s > 0 ? mb / r.theirs_s : 0.0) << " MB/s");
  return r;
}

// Model-level agreement: sizes, special ids, every piece.
void compare_vocab(const Tokenizer& ours, const sentencepiece::SentencePieceProcessor& sp) {
  REQUIRE(ours.vocab_size() == sp.GetPieceSize());
  CHECK(ours.bos_id() == sp.bos_id());
  CHECK(ours.eos_id() == sp.eos_id());
  CHECK(ours.unk_id() == sp.unk_id());
  CHECK(ours.pad_id() == sp.pad_id());
  int bad = 0;
  for (int i = 0; i < sp.GetPieceSize(); ++i) {
    if (ours.piece(i) != sp.IdToPiece(i)) ++bad;
    if (ours.piece_to_id(sp.IdToPiece(i)) != std::optional<TokenId>(i)) ++bad;
  }
  CHECK(bad == 0);
}

// Short strings aimed at the corner cases: whitespace runs, tabs, newlines,
// invalid UTF-8, unknown characters, user symbols, normalization rules.
std::vector<std::string> edge_cases() {
  return {" ",
          "  ",
          "a",
          " a",
          "  leading and trailing  ",
          "tabs\tand\ttabs\t",
          "line\nbreak\r\n",
          "\t\t    indented(x):",
          "multiple     spaces   inside",
          "\xE2\x96\x81 already escaped \xE2\x96\x81\xE2\x96\x81",
          "caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x98\x80\xF0\x9F\x98\x80",
          "invalid \xFF\xFE bytes \xC3 \xE2\x82 \xED\xA0\x80 \xF4\x90\x80\x80 \xC0\xAF",
          "replacement \xEF\xBF\xBD char",
          "<|tool|>call<|tool|> @@x@@ <ctl> <s> </s> <unk>",
          "\xEF\xBC\xA8\xEF\xBD\x85\xEF\xBD\x8C\xEF\xBD\x8C\xEF\xBD\x8F \xEF\xAC\x81ne\xE2\x80\xA6 "
          "\xE2\x80\x98q\xE2\x80\x99 \xE2\x91\xA0\xE2\x91\xA1 A\xCC\x80 \xC2\xA0\xE3\x80\x80x",
          "digits 0123456789 3.14159 1e-9 0xFF",
          std::string("nul\0byte", 8),
          std::string(3000, 'x') + " " + std::string(500, ' ') + "end"};
}

void check_pair(const Tokenizer& ours, const sentencepiece::SentencePieceProcessor& sp,
                const std::vector<std::string>& lines, const std::string& name, std::size_t min_lines) {
  compare_vocab(ours, sp);
  REQUIRE(lines.size() >= min_lines);
  const Report r = compare(ours, sp, lines, name);
  CHECK(r.lines >= min_lines);
  CHECK(r.encode_mismatches == 0);
  CHECK(r.decode_mismatches == 0);
  CHECK(r.scrambled_mismatches == 0);
  // Whole documents: 40 lines joined by newlines (the corpus encodes
  // documents, and our encoder splits them at never-merged bytes).
  std::vector<std::string> docs;
  for (std::size_t i = 0; i < lines.size(); i += 40) {
    std::string d;
    for (std::size_t k = i; k < std::min(lines.size(), i + 40); ++k) d += lines[k] + "\n";
    docs.push_back(std::move(d));
  }
  const Report d = compare(ours, sp, docs, name + " (" + std::to_string(docs.size()) + " documents)");
  CHECK(d.encode_mismatches == 0);
  CHECK(d.decode_mismatches == 0);
  CHECK(d.scrambled_mismatches == 0);
  const Report e = compare(ours, sp, edge_cases(), name + " (edge cases)");
  CHECK(e.encode_mismatches == 0);
  CHECK(e.decode_mismatches == 0);
  CHECK(e.scrambled_mismatches == 0);
}

void check_model(const std::string& model_path, const std::string& text_path, std::size_t min_lines,
                 std::size_t max_lines) {
  INFO("model " << model_path << ", text " << text_path);
  sentencepiece::SentencePieceProcessor sp;
  const auto status = sp.Load(model_path);
  REQUIRE(status.ok());
  const Tokenizer ours = Tokenizer::load(model_path);
  const auto lines = tok_test::read_lines(text_path, max_lines);
  const std::string name = std::filesystem::path(model_path).filename().string();
  check_pair(ours, sp, lines, name + " on " + text_path, min_lines);
}

}  // namespace

TEST_CASE("Committed spm_train models match libsentencepiece token for token", "[unit][tokenizer][oracle]") {
  for (const char* name : {"llama_style.model", "project_style.model", "classic_style.model"}) {
    SECTION(name) {
      check_model(kData + "/" + name, kData + "/heldout.txt", 2000, ~std::size_t{0});
    }
  }
}

TEST_CASE("The project tokenizer matches libsentencepiece on 10,000+ held-out lines",
          "[unit][tokenizer][oracle]") {
  const std::string model =
      env_or("SPECDEC_TOKENIZER_MODEL", std::filesystem::exists(SPECDEC_DEFAULT_TOKENIZER_MODEL)
                                            ? SPECDEC_DEFAULT_TOKENIZER_MODEL
                                            : SPECDEC_FALLBACK_TOKENIZER_MODEL);
  const std::string text = env_or("SPECDEC_TOKENIZER_TEXT", SPECDEC_DEFAULT_HELDOUT_TEXT);
  if (!std::filesystem::exists(model)) {
    WARN("skipped: no tokenizer model at " << model
                                           << " (run scripts/corpus/train_tokenizer.sh, or set "
                                              "SPECDEC_TOKENIZER_MODEL)");
    return;
  }
  if (!std::filesystem::exists(text)) {
    WARN("skipped: no held-out text at " << text << " (set SPECDEC_TOKENIZER_TEXT)");
    return;
  }
  std::size_t max_lines = ~std::size_t{0};
  if (const char* m = std::getenv("SPECDEC_TOKENIZER_MAX_LINES"); m != nullptr && *m != '\0')
    max_lines = std::stoull(m);
  check_model(model, text, std::min<std::size_t>(10000, max_lines), max_lines);
}

TEST_CASE("Models edited and written by our protobuf writer match libsentencepiece",
          "[unit][tokenizer][oracle]") {
  using specdec::tokenizer::ModelProto;
  using specdec::tokenizer::PieceType;
  const ModelProto base = specdec::tokenizer::load_model_proto(kData + "/project_style.model");
  const auto lines = tok_test::read_lines(kData + "/heldout.txt", 1500);
  auto check = [&](const ModelProto& m, const std::string& what) {
    SECTION(what) {
      const std::string bytes = specdec::tokenizer::serialize_model_proto(m);
      sentencepiece::SentencePieceProcessor sp;
      const auto status = sp.LoadFromSerializedProto(bytes);
      INFO(status.ToString());
      REQUIRE(status.ok());
      const Tokenizer ours = Tokenizer::from_sentencepiece(specdec::tokenizer::parse_model_proto(bytes));
      check_pair(ours, sp, lines, "project_style.model, " + what, 1000);
    }
  };
  {
    ModelProto m = base;  // every 5th merge piece UNUSED: intermediate only
    for (std::size_t i = 0; i < m.pieces.size(); ++i)
      if (m.pieces[i].type == PieceType::kNormal && i % 5 == 0 &&
          tok_test::utf8_chars(m.pieces[i].piece).size() > 1)
        m.pieces[i].type = PieceType::kUnused;
    check(m, "UNUSED pieces");
  }
  {
    ModelProto m = base;  // SentencePiece's default whitespace handling
    m.normalizer_spec.add_dummy_prefix = true;
    m.normalizer_spec.remove_extra_whitespaces = true;
    check(m, "dummy prefix and whitespace removal");
  }
  {
    ModelProto m = base;  // Llama's: dummy prefix, whitespace kept
    m.normalizer_spec.add_dummy_prefix = true;
    check(m, "dummy prefix only");
  }
  {
    ModelProto m = base;
    m.normalizer_spec.escape_whitespaces = false;
    check(m, "no whitespace escaping");
  }
  {
    ModelProto m = base;  // user-defined symbols, one containing a space
    for (const std::string& u :
         std::vector<std::string>{"def ", "self.", "the" + tok_test::kSp, "<|tool|>", "(x", "(", "ing"}) {
      auto same = [&](const auto& p) { return p.piece == u; };
      const auto it = std::find_if(m.pieces.begin(), m.pieces.end(), same);
      if (it == m.pieces.end())
        m.pieces.push_back({u, 0.0f, PieceType::kUserDefined});
      else
        it->type = PieceType::kUserDefined;  // an existing piece becomes user-defined
    }
    m.trainer_spec.vocab_size = static_cast<int>(m.pieces.size());
    check(m, "user-defined symbols");
  }
  {
    ModelProto m = base;  // no byte fallback: runs of unknowns are one <unk>
    std::vector<specdec::tokenizer::SentencePiece> kept;
    for (const auto& p : m.pieces)
      if (p.type != PieceType::kByte) kept.push_back(p);
    m.pieces = kept;
    m.trainer_spec.byte_fallback = false;
    m.trainer_spec.vocab_size = static_cast<int>(m.pieces.size());
    m.trainer_spec.unk_surface = "<?>";
    check(m, "no byte fallback");
  }
}
