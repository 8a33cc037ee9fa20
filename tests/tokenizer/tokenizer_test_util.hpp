// Helpers shared by the tokenizer tests: crafted SentencePiece models, file
// reading, and a SentencePiece -> Hugging Face tokenizer.json converter.
#pragma once

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "specdec/tokenizer/sentencepiece_model.hpp"
#include "specdec/tokenizer/tokenizer.hpp"

namespace tok_test {

using specdec::tokenizer::ModelProto;
using specdec::tokenizer::ModelType;
using specdec::tokenizer::PieceType;
using specdec::tokenizer::SentencePiece;

inline const std::string kSp = "\xE2\x96\x81";  // ▁

// <unk>, <s>, </s>, optionally the 256 byte pieces, then what add() appends.
struct ModelBuilder {
  ModelProto m;
  explicit ModelBuilder(bool byte_fallback = true) {
    m.trainer_spec.model_type = ModelType::kBpe;
    m.trainer_spec.byte_fallback = byte_fallback;
    m.normalizer_spec.name = "identity";
    m.pieces.push_back({"<unk>", 0.0f, PieceType::kUnknown});
    m.pieces.push_back({"<s>", 0.0f, PieceType::kControl});
    m.pieces.push_back({"</s>", 0.0f, PieceType::kControl});
    if (byte_fallback) {
      for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        m.pieces.push_back({name, 0.0f, PieceType::kByte});
      }
    }
  }
  ModelBuilder& add(std::string piece, float score, PieceType t = PieceType::kNormal) {
    m.pieces.push_back({std::move(piece), score, t});
    return *this;
  }
  // Single characters with a low score.
  ModelBuilder& chars(const std::vector<std::string>& cs) {
    for (const auto& c : cs) add(c, -100.0f);
    return *this;
  }
  ModelBuilder& dummy_prefix(bool v) {
    m.normalizer_spec.add_dummy_prefix = v;
    return *this;
  }
  ModelBuilder& remove_extra_whitespaces(bool v) {
    m.normalizer_spec.remove_extra_whitespaces = v;
    return *this;
  }
  specdec::tokenizer::Tokenizer build() const {
    // Through the wire format, as a file would be.
    return specdec::tokenizer::Tokenizer::from_sentencepiece(
        specdec::tokenizer::parse_model_proto(specdec::tokenizer::serialize_model_proto(m), "crafted"),
        "crafted");
  }
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Non-empty lines of a file (a trailing '\r' is kept: it is text too).
inline std::vector<std::string> read_lines(const std::string& path, std::size_t max_lines = ~std::size_t{0}) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::string> lines;
  std::string line;
  while (lines.size() < max_lines && std::getline(in, line))
    if (!line.empty()) lines.push_back(line);
  return lines;
}

inline std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t n = 1;
    while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80) ++n;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

// A Llama-style tokenizer.json for a SentencePiece BPE model, built the way
// transformers' LlamaConverter does: the vocab in id order; merges (l, r) for
// every NORMAL piece split at each character boundary into two vocab pieces,
// ordered by the merged piece's score (descending, stable), then by the ids
// of l and r; control/unknown pieces as special added tokens, user-defined
// pieces as non-special ones.
//   legacy: normalizer Prepend("▁") + Replace(" ", "▁"), decoder Replace +
//           ByteFallback + Fuse + Strip(" ", 1, 0)
//   else:   Metaspace pre-tokenizer (prepend_scheme "first", split false) and
//           decoder ByteFallback + Metaspace + Fuse.
inline std::string spm_to_hf_json(const ModelProto& m, bool legacy = true) {
  using nlohmann::json;
  json vocab = json::object();
  std::map<std::string, int> ids;
  for (std::size_t i = 0; i < m.pieces.size(); ++i) {
    vocab[m.pieces[i].piece] = i;
    ids[m.pieces[i].piece] = static_cast<int>(i);
  }
  struct M {
    std::string l, r;
    float score;
    int il, ir;
  };
  std::vector<M> merges;
  for (const auto& p : m.pieces) {
    if (p.type != PieceType::kNormal) continue;
    const auto cs = utf8_chars(p.piece);
    std::vector<M> local;
    std::string l;
    for (std::size_t k = 1; k < cs.size(); ++k) {
      l += cs[k - 1];
      const std::string r = p.piece.substr(l.size());
      const auto a = ids.find(l), b = ids.find(r);
      if (a != ids.end() && b != ids.end()) local.push_back({l, r, p.score, a->second, b->second});
    }
    std::sort(local.begin(), local.end(),
              [](const M& x, const M& y) { return std::pair(x.il, x.ir) < std::pair(y.il, y.ir); });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [](const M& x, const M& y) { return x.score > y.score; });
  json jm = json::array();
  for (const auto& x : merges) jm.push_back(json::array({x.l, x.r}));

  json added = json::array();
  for (std::size_t i = 0; i < m.pieces.size(); ++i) {
    const auto t = m.pieces[i].type;
    if (t != PieceType::kControl && t != PieceType::kUnknown && t != PieceType::kUserDefined) continue;
    added.push_back({{"id", i},
                     {"content", m.pieces[i].piece},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", t != PieceType::kUserDefined}});
  }
  const bool prefix = m.normalizer_spec.add_dummy_prefix;
  json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  if (legacy) {
    json norms = json::array();
    if (prefix) norms.push_back({{"type", "Prepend"}, {"prepend", kSp}});
    norms.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSp}});
    j["normalizer"] = {{"type", "Sequence"}, {"normalizers", norms}};
    j["pre_tokenizer"] = nullptr;
    json decs = json::array();
    decs.push_back({{"type", "Replace"}, {"pattern", {{"String", kSp}}}, {"content", " "}});
    decs.push_back({{"type", "ByteFallback"}});
    decs.push_back({{"type", "Fuse"}});
    if (prefix) decs.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    j["decoder"] = {{"type", "Sequence"}, {"decoders", decs}};
  } else {
    const char* scheme = prefix ? "first" : "never";
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {
        {"type", "Metaspace"}, {"replacement", kSp}, {"prepend_scheme", scheme}, {"split", false}};
    json decs = json::array();
    decs.push_back({{"type", "ByteFallback"}});
    decs.push_back(
        {{"type", "Metaspace"}, {"replacement", kSp}, {"prepend_scheme", scheme}, {"split", false}});
    decs.push_back({{"type", "Fuse"}});
    j["decoder"] = {{"type", "Sequence"}, {"decoders", decs}};
  }
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", "<unk>"},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", true},
                {"byte_fallback", m.trainer_spec.byte_fallback},
                {"vocab", vocab},
                {"merges", jm}};
  return j.dump();
}

}  // namespace tok_test
