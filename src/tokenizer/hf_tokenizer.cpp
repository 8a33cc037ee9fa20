// Hugging Face tokenizer.json with a BPE model, as the Llama family ships it.
// Follows the `tokenizers` library's pipeline: added tokens split out of the
// raw text, then per remaining segment the normalizer, the pre-tokenizer and
// BPE (merges by rank, lowest first, leftmost on ties); decoding runs the
// decoder chain. Unsupported components throw TokenizerError at load time.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "specdec/core/error.hpp"
#include "specdec/tokenizer/text_util.hpp"
#include "specdec/tokenizer/tokenizer.hpp"

namespace specdec::tokenizer::detail {

namespace {

using nlohmann::json;

enum class Prepend { kAlways, kFirst, kNever };

struct NormalizerStep {
  enum Kind { kPrepend, kReplace } kind;
  std::string a;  // prepend text / pattern
  std::string b;  // replacement
};

struct DecoderStep {
  enum Kind { kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
  std::string a;  // Replace pattern / Strip content / Metaspace replacement
  std::string b;  // Replace content
  std::size_t start = 0;
  std::size_t stop = 0;
  Prepend prepend = Prepend::kAlways;
};

struct AddedToken {
  std::string content;
  TokenId id = 0;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
};

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty() || s.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s.size() + s.size() / 2);
  std::size_t pos = 0;
  for (;;) {
    const std::size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

std::size_t utf8_char_count(std::string_view s) {
  std::size_t n = 0;
  for (const char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

class HfTokenizer final : public TokenizerImpl {
 public:
  HfTokenizer(std::string_view text, std::string source);
  // vocab_ points into id_to_token_: the object stays where it was built.
  HfTokenizer(const HfTokenizer&) = delete;
  HfTokenizer& operator=(const HfTokenizer&) = delete;

  TokenizerKind kind() const noexcept override { return TokenizerKind::kHuggingFace; }
  void encode(std::string_view text, std::vector<TokenId>& out) const override;
  std::string decode(std::span<const TokenId> ids) const override;
  const std::string& piece(TokenId id) const override { return id_to_token_[static_cast<std::size_t>(id)]; }
  std::optional<TokenId> piece_to_id(std::string_view piece) const override {
    const TokenId id = vocab_.find(piece);
    if (id < 0) return std::nullopt;
    return id;
  }
  TokenId vocab_size() const noexcept override { return static_cast<TokenId>(id_to_token_.size()); }
  TokenId bos_id() const noexcept override { return bos_; }
  TokenId eos_id() const noexcept override { return eos_; }
  TokenId unk_id() const noexcept override { return unk_; }
  TokenId pad_id() const noexcept override { return pad_; }

 private:
  [[noreturn]] void unsupported(std::string_view what) const {
    throw TokenizerError(fmt::format("{}: unsupported {}", source_, what));
  }
  [[noreturn]] void malformed(std::string_view what) const {
    throw TokenizerError(fmt::format("{}: malformed tokenizer.json: {}", source_, what));
  }
  void parse_model(const json& m);
  void parse_normalizer(const json& n);
  void parse_pre_tokenizer(const json& p);
  void parse_decoder(const json& d);
  void parse_added_tokens(const json& a);
  Prepend parse_prepend_scheme(const json& obj) const;

  // Leftmost-longest match of an added token (of the given normalized flag)
  // in `s` from `from`: {begin, end, token index}; begin == npos if none.
  struct Match {
    std::size_t begin, end, token;
  };
  Match find_added(std::string_view s, std::size_t from, bool normalized) const;
  // Splits `s` on added tokens; text pieces go to `on_text(text, offset)`.
  template <class F>
  void split_added(std::string_view s, bool normalized, std::vector<TokenId>& out, F&& on_text) const;
  void encode_segment(std::string_view raw, bool at_start, std::vector<TokenId>& out) const;
  void encode_word(std::string_view word, std::vector<TokenId>& out) const;
  void merge_run(std::span<const TokenId> ids, std::vector<TokenId>& out) const;
  void run_decoders(std::vector<std::string>& tokens) const;

  std::string source_;
  std::vector<std::string> id_to_token_;
  std::vector<char> is_special_;
  StringIdMap vocab_;
  std::unordered_map<std::uint64_t, std::pair<std::uint32_t, TokenId>> merges_;
  std::vector<char> in_merge_;  // per id: is it either side of some merge?
  std::array<TokenId, 256> byte_ids_{};
  bool byte_fallback_ = false;
  bool all_bytes_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::vector<NormalizerStep> normalizer_;
  bool metaspace_ = false;
  std::string meta_replacement_;
  Prepend meta_prepend_ = Prepend::kAlways;
  bool meta_split_ = true;
  std::vector<AddedToken> added_;
  // Indices into added_ by first byte, for raw [0] and normalized [1] tokens.
  std::array<std::array<std::vector<std::size_t>, 256>, 2> added_by_first_{};
  bool has_normalized_added_ = false;
  bool has_raw_added_ = false;
  bool has_decoder_ = false;
  std::vector<DecoderStep> decoder_;
  TokenId unk_ = kNoToken, bos_ = kNoToken, eos_ = kNoToken, pad_ = kNoToken;
};

// A token id as the file holds it: an integer in [0, 100,000,000]; nullopt
// for anything else. (nlohmann's get<std::int64_t> casts any number, and a
// float beyond int64's range is undefined behaviour: a fuzzed
// tokenizer.json found it.)
std::optional<std::int64_t> token_id(const json& v) {
  if (!v.is_number_integer()) return std::nullopt;
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    return u <= 100'000'000 ? std::optional<std::int64_t>(static_cast<std::int64_t>(u)) : std::nullopt;
  }
  const auto i = v.get<std::int64_t>();
  return i >= 0 && i <= 100'000'000 ? std::optional<std::int64_t>(i) : std::nullopt;
}

std::string str_field(const json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return {};
  return it->get<std::string>();
}

HfTokenizer::HfTokenizer(std::string_view text, std::string source) : source_(std::move(source)) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw TokenizerError(fmt::format("{}: not valid JSON: {}", source_, e.what()));
  }
  if (!root.is_object()) malformed("top level is not an object");
  try {
    if (!root.contains("model") || !root["model"].is_object()) malformed("no \"model\" object");
    parse_model(root["model"]);
    if (root.contains("added_tokens")) parse_added_tokens(root["added_tokens"]);
    if (root.contains("normalizer")) parse_normalizer(root["normalizer"]);
    if (root.contains("pre_tokenizer")) parse_pre_tokenizer(root["pre_tokenizer"]);
    if (root.contains("decoder") && !root["decoder"].is_null()) {
      has_decoder_ = true;
      parse_decoder(root["decoder"]);
    }
    // Special ids: BOS from the post-processor template when there is one,
    // else by the usual names.
    auto find_name = [&](std::initializer_list<const char*> names) {
      for (const char* n : names) {
        const TokenId id = vocab_.find(n);
        if (id >= 0) return id;
      }
      return kNoToken;
    };
    const json* post = root.contains("post_processor") ? &root["post_processor"] : nullptr;
    if (post && post->is_object() && str_field(*post, "type") == "TemplateProcessing" &&
        post->contains("single") && (*post)["single"].is_array() && !(*post)["single"].empty()) {
      const json& first = (*post)["single"][0];
      if (first.contains("SpecialToken")) {
        const std::string name = str_field(first["SpecialToken"], "id");
        const TokenId id = vocab_.find(name);
        if (id >= 0) bos_ = id;
      }
    }
    if (bos_ < 0) bos_ = find_name({"<s>", "<|begin_of_text|>", "<bos>", "<|startoftext|>"});
    eos_ = find_name({"</s>", "<|end_of_text|>", "<eos>", "<|endoftext|>"});
    pad_ = find_name({"<pad>", "<|pad|>"});
  } catch (const json::exception& e) {
    throw TokenizerError(fmt::format("{}: malformed tokenizer.json: {}", source_, e.what()));
  }
  in_merge_.assign(id_to_token_.size(), 0);
  for (const auto& [pair, value] : merges_) {
    in_merge_[static_cast<std::size_t>(pair >> 32)] = 1;
    in_merge_[static_cast<std::size_t>(pair & 0xFFFFFFFFu)] = 1;
  }
  is_special_.assign(id_to_token_.size(), 0);
  for (const AddedToken& t : added_)
    if (t.special) is_special_[static_cast<std::size_t>(t.id)] = 1;
}

void HfTokenizer::parse_model(const json& m) {
  const std::string type = str_field(m, "type");
  if (type != "BPE")
    unsupported(
        fmt::format("model type \"{}\" (only BPE is implemented)", type.empty() ? "<missing>" : type));
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0)
    unsupported("BPE dropout");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && !m[key].is_null() && !m[key].get<std::string>().empty())
      unsupported(fmt::format("BPE option {}", key));
  }
  byte_fallback_ = m.value("byte_fallback", false);
  fuse_unk_ = m.value("fuse_unk", false);
  ignore_merges_ = m.value("ignore_merges", false);

  if (!m.contains("vocab") || !m["vocab"].is_object()) malformed("model has no \"vocab\" object");
  const json& vocab = m["vocab"];
  TokenId max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto id = token_id(it.value());
    if (!id)
      malformed(fmt::format("vocab id {} for \"{}\" (ids are integers in [0, 1e8])", it.value().dump(), it.key()));
    max_id = std::max(max_id, static_cast<TokenId>(*id));
  }
  id_to_token_.assign(static_cast<std::size_t>(max_id + 1), std::string());
  std::vector<char> seen(id_to_token_.size(), 0);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto id = static_cast<std::size_t>(*token_id(it.value()));  // checked above
    if (seen[id])
      malformed(fmt::format("vocab id {} used by both \"{}\" and \"{}\"", id, id_to_token_[id], it.key()));
    seen[id] = 1;
    id_to_token_[id] = it.key();
  }
  for (std::size_t i = 0; i < id_to_token_.size(); ++i)
    if (seen[i]) vocab_.insert(id_to_token_[i], static_cast<TokenId>(i));

  byte_ids_.fill(kNoToken);
  all_bytes_ = true;
  for (int b = 0; b < 256; ++b) {
    byte_ids_[static_cast<std::size_t>(b)] = vocab_.find(fmt::format("<0x{:02X}>", b));
    if (byte_ids_[static_cast<std::size_t>(b)] < 0) all_bytes_ = false;
  }

  if (m.contains("unk_token") && !m["unk_token"].is_null()) {
    const std::string unk = m["unk_token"].get<std::string>();
    unk_ = vocab_.find(unk);
    if (unk_ < 0) malformed(fmt::format("unk_token \"{}\" is not in the vocab", unk));
  }

  if (!m.contains("merges") || !m["merges"].is_array()) malformed("model has no \"merges\" array");
  const json& merges = m["merges"];
  merges_.reserve(merges.size() * 2);
  std::uint32_t rank = 0;
  for (const json& e : merges) {
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const std::size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        malformed(fmt::format("merge {} \"{}\" is not two tokens separated by one space", rank, s));
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      malformed(fmt::format("merge {} is neither \"a b\" nor [a, b]", rank));
    }
    const TokenId ia = vocab_.find(a), ib = vocab_.find(b), im = vocab_.find(a + b);
    if (ia < 0 || ib < 0 || im < 0)
      malformed(fmt::format("merge {} (\"{}\", \"{}\") uses a token not in the vocab", rank, a, b));
    // Later duplicates win, as in `tokenizers` (a map built by insertion).
    merges_[(static_cast<std::uint64_t>(ia) << 32) | static_cast<std::uint32_t>(ib)] = {rank, im};
    ++rank;
  }
}

void HfTokenizer::parse_added_tokens(const json& a) {
  if (a.is_null()) return;
  if (!a.is_array()) malformed("\"added_tokens\" is not an array");
  for (const json& t : a) {
    AddedToken tok;
    tok.content = t.at("content").get<std::string>();
    const auto id = token_id(t.at("id"));
    if (!id) malformed(fmt::format("added token id {} (ids are integers in [0, 1e8])", t.at("id").dump()));
    tok.id = static_cast<TokenId>(*id);
    tok.special = t.value("special", false);
    tok.normalized = t.value("normalized", !tok.special);
    tok.lstrip = t.value("lstrip", false);
    tok.rstrip = t.value("rstrip", false);
    if (t.value("single_word", false))
      unsupported(fmt::format("added token option single_word=true (token \"{}\")", tok.content));
    if (tok.content.empty()) malformed(fmt::format("added token {} is empty", tok.id));
    const auto uid = static_cast<std::size_t>(tok.id);
    if (uid >= id_to_token_.size()) id_to_token_.resize(uid + 1);
    if (id_to_token_[uid].empty()) {
      id_to_token_[uid] = tok.content;
    } else if (id_to_token_[uid] != tok.content) {
      malformed(fmt::format("added token \"{}\" has id {}, which the vocab gives to \"{}\"", tok.content, tok.id,
                            id_to_token_[uid]));
    }
    (tok.normalized ? has_normalized_added_ : has_raw_added_) = true;
    added_by_first_[tok.normalized ? 1 : 0][static_cast<unsigned char>(tok.content[0])].push_back(
        added_.size());
    added_.push_back(std::move(tok));
  }
  // Re-point map keys at the final strings (resize may have moved them).
  vocab_ = StringIdMap();
  for (std::size_t i = 0; i < id_to_token_.size(); ++i)
    if (!id_to_token_[i].empty()) vocab_.insert(id_to_token_[i], static_cast<TokenId>(i));
}

void HfTokenizer::parse_normalizer(const json& n) {
  if (n.is_null()) return;
  const std::string type = str_field(n, "type");
  if (type == "Sequence") {
    for (const json& c : n.at("normalizers")) parse_normalizer(c);
  } else if (type == "Prepend") {
    normalizer_.push_back({NormalizerStep::kPrepend, n.at("prepend").get<std::string>(), {}});
  } else if (type == "Replace") {
    const json& pat = n.at("pattern");
    if (!pat.contains("String")) unsupported("normalizer Replace with a regex pattern");
    normalizer_.push_back(
        {NormalizerStep::kReplace, pat["String"].get<std::string>(), n.at("content").get<std::string>()});
  } else {
    unsupported(fmt::format("normalizer \"{}\" (supported: Sequence, Prepend, Replace)", type));
  }
}

Prepend HfTokenizer::parse_prepend_scheme(const json& obj) const {
  if (obj.contains("prepend_scheme")) {
    const std::string s = obj["prepend_scheme"].get<std::string>();
    if (s == "always") return Prepend::kAlways;
    if (s == "first") return Prepend::kFirst;
    if (s == "never") return Prepend::kNever;
    malformed(fmt::format("unknown Metaspace prepend_scheme \"{}\"", s));
  }
  return obj.value("add_prefix_space", true) ? Prepend::kAlways : Prepend::kNever;
}

void HfTokenizer::parse_pre_tokenizer(const json& p) {
  if (p.is_null()) return;
  const std::string type = str_field(p, "type");
  if (type == "Sequence") {
    for (const json& c : p.at("pretokenizers")) parse_pre_tokenizer(c);
  } else if (type == "Metaspace") {
    if (metaspace_) unsupported("more than one Metaspace pre-tokenizer");
    metaspace_ = true;
    meta_replacement_ = p.value("replacement", std::string(kSpaceSymbol));
    if (utf8_char_count(meta_replacement_) != 1) malformed("Metaspace replacement is not one character");
    meta_prepend_ = parse_prepend_scheme(p);
    meta_split_ = p.value("split", true);
  } else {
    unsupported(fmt::format("pre_tokenizer \"{}\" (supported: Metaspace, Sequence)", type));
  }
}

void HfTokenizer::parse_decoder(const json& d) {
  const std::string type = str_field(d, "type");
  if (type == "Sequence") {
    for (const json& c : d.at("decoders")) parse_decoder(c);
  } else if (type == "Replace") {
    const json& pat = d.at("pattern");
    if (!pat.contains("String")) unsupported("decoder Replace with a regex pattern");
    decoder_.push_back(DecoderStep{DecoderStep::kReplace, pat["String"].get<std::string>(),
                                   d.at("content").get<std::string>()});
  } else if (type == "ByteFallback") {
    decoder_.push_back(DecoderStep{DecoderStep::kByteFallback, {}, {}});
  } else if (type == "Fuse") {
    decoder_.push_back(DecoderStep{DecoderStep::kFuse, {}, {}});
  } else if (type == "Strip") {
    DecoderStep s{DecoderStep::kStrip, d.at("content").get<std::string>(), {}};
    if (utf8_char_count(s.a) != 1) malformed("Strip decoder content is not one character");
    s.start = d.value("start", std::size_t{0});
    s.stop = d.value("stop", std::size_t{0});
    decoder_.push_back(std::move(s));
  } else if (type == "Metaspace") {
    DecoderStep s{DecoderStep::kMetaspace, d.value("replacement", std::string(kSpaceSymbol)), {}};
    if (utf8_char_count(s.a) != 1) malformed("Metaspace replacement is not one character");
    s.prepend = parse_prepend_scheme(d);
    decoder_.push_back(std::move(s));
  } else {
    unsupported(
        fmt::format("decoder \"{}\" (supported: Sequence, Replace, ByteFallback, Fuse, "
                    "Strip, Metaspace)",
                    type));
  }
}

HfTokenizer::Match HfTokenizer::find_added(std::string_view s, std::size_t from, bool normalized) const {
  const auto& by_first = added_by_first_[normalized ? 1 : 0];
  for (std::size_t i = from; i < s.size(); ++i) {
    std::size_t best = added_.size();
    std::size_t best_len = 0;
    for (const std::size_t k : by_first[static_cast<unsigned char>(s[i])]) {
      const AddedToken& t = added_[k];
      if (t.content.size() > best_len && s.compare(i, t.content.size(), t.content) == 0) {
        best = k;
        best_len = t.content.size();
      }
    }
    if (best < added_.size()) return {i, i + best_len, best};
  }
  return {std::string_view::npos, 0, 0};
}

template <class F>
void HfTokenizer::split_added(std::string_view s, bool normalized, std::vector<TokenId>& out,
                              F&& on_text) const {
  std::size_t pos = 0;
  while (pos < s.size()) {
    const Match m = find_added(s, pos, normalized);
    if (m.begin == std::string_view::npos) break;
    const AddedToken& t = added_[m.token];
    std::size_t begin = m.begin, end = m.end;
    if (t.lstrip)
      while (begin > pos && is_ascii_space(s[begin - 1])) --begin;
    if (t.rstrip)
      while (end < s.size() && is_ascii_space(s[end])) ++end;
    if (begin > pos) on_text(s.substr(pos, begin - pos), pos);
    out.push_back(t.id);
    pos = end;
  }
  if (pos < s.size()) on_text(s.substr(pos), pos);
}

void HfTokenizer::encode(std::string_view text, std::vector<TokenId>& out) const {
  // Rust strings are valid UTF-8: replace each invalid byte by U+FFFD first,
  // as SentencePiece does.
  std::string clean;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = valid_utf8_len(text.substr(i));
    if (n == 0) {
      clean.assign(text.substr(0, i));
      append_utf8_replacing_invalid(text.substr(i), clean);
      text = clean;
      break;
    }
    i += n;
  }
  if (!has_raw_added_) {
    encode_segment(text, true, out);
    return;
  }
  split_added(text, false, out,
              [&](std::string_view seg, std::size_t offset) { encode_segment(seg, offset == 0, out); });
}

void HfTokenizer::encode_segment(std::string_view raw, bool at_start, std::vector<TokenId>& out) const {
  std::string s(raw);
  for (const NormalizerStep& step : normalizer_) {
    if (step.kind == NormalizerStep::kPrepend) {
      if (!s.empty()) s.insert(0, step.a);
    } else {
      replace_all(s, step.a, step.b);
    }
  }
  auto pre_tokenize = [&](std::string_view piece, bool first) {
    if (!metaspace_) {
      encode_word(piece, out);
      return;
    }
    std::string w(piece);
    replace_all(w, " ", meta_replacement_);
    const bool prepend = meta_prepend_ == Prepend::kAlways || (meta_prepend_ == Prepend::kFirst && first);
    if (prepend && w.compare(0, meta_replacement_.size(), meta_replacement_) != 0)
      w.insert(0, meta_replacement_);
    if (!meta_split_) {
      encode_word(w, out);
      return;
    }
    // Split before every replacement character (it stays with what follows).
    const std::string_view v = w;
    std::size_t start = 0;
    for (std::size_t hit = v.find(meta_replacement_, 1); hit != std::string_view::npos;
         hit = v.find(meta_replacement_, hit + meta_replacement_.size())) {
      encode_word(v.substr(start, hit - start), out);
      start = hit;
    }
    encode_word(v.substr(start), out);
  };
  if (!has_normalized_added_) {
    pre_tokenize(s, at_start);
    return;
  }
  split_added(s, true, out, [&](std::string_view piece, std::size_t offset) {
    pre_tokenize(piece, at_start && offset == 0);
  });
}

// `tokenizers`' BPE::merge_word + Word::merge_all: one symbol per character
// (unknown characters as byte tokens, or <unk>, fused when fuse_unk), then
// merges applied lowest rank first, leftmost first among equal ranks.
void HfTokenizer::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const TokenId id = vocab_.find(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<TokenId> ids;
  ids.reserve(word.size());
  TokenId pending_unk = kNoToken;
  for (std::size_t i = 0; i < word.size();) {
    std::size_t n = valid_utf8_len(word.substr(i));
    if (n == 0) n = 1;  // not reached: encode() cleaned the text
    const std::string_view ch = word.substr(i, n);
    i += n;
    const TokenId id = vocab_.find(ch);
    if (id >= 0) {
      if (pending_unk >= 0) ids.push_back(pending_unk);
      pending_unk = kNoToken;
      ids.push_back(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (const char b : ch) all = all && byte_ids_[static_cast<unsigned char>(b)] >= 0;
      if (all) {
        for (const char b : ch) ids.push_back(byte_ids_[static_cast<unsigned char>(b)]);
        continue;
      }
    }
    if (unk_ < 0) {
      std::string hex;
      for (const char b : ch) hex += fmt::format("{:02X}", static_cast<unsigned char>(b));
      throw TokenizerError(
          fmt::format("{}: cannot encode character \"{}\" (bytes {}): not in the "
                      "vocab, and the model has neither byte fallback nor an "
                      "unk_token",
                      source_, ch, hex));
    }
    if (pending_unk >= 0 && !fuse_unk_) ids.push_back(pending_unk);
    pending_unk = unk_;
  }
  if (pending_unk >= 0) ids.push_back(pending_unk);
  // A symbol in no merge pair never merges: the runs between such symbols
  // are independent (a long word costs what its pieces cost).
  std::size_t start = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (in_merge_[static_cast<std::size_t>(ids[i])]) continue;
    merge_run(std::span<const TokenId>(ids).subspan(start, i - start), out);
    out.push_back(ids[i]);
    start = i + 1;
  }
  merge_run(std::span<const TokenId>(ids).subspan(start), out);
}

// `tokenizers`' Word::merge_all: merges applied lowest rank first, leftmost
// first among equal ranks; a popped merge is stale unless its pair still maps
// to the same new token.
void HfTokenizer::merge_run(std::span<const TokenId> ids, std::vector<TokenId>& out) const {
  if (ids.size() < 2) {
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  struct Symbol {
    TokenId id;
    std::int32_t prev;
    std::int32_t next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto n = static_cast<std::int32_t>(i);
    symbols.push_back(Symbol{ids[i], n - 1, n + 1, true});
  }
  symbols.back().next = -1;

  struct Merge {
    std::uint32_t rank;
    std::int32_t pos;
    TokenId new_id;
  };
  struct Later {  // min-heap on (rank, pos)
    bool operator()(const Merge& a, const Merge& b) const noexcept {
      return a.rank > b.rank || (a.rank == b.rank && a.pos > b.pos);
    }
  };
  auto lookup = [&](TokenId a, TokenId b) -> const std::pair<std::uint32_t, TokenId>* {
    const auto it = merges_.find((static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint32_t>(b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  std::vector<Merge> storage;
  storage.reserve(symbols.size());
  std::priority_queue<Merge, std::vector<Merge>, Later> queue(Later{}, std::move(storage));
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i)
    if (const auto* m = lookup(symbols[i].id, symbols[i + 1].id))
      queue.push(Merge{m->first, static_cast<std::int32_t>(i), m->second});

  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& cur = symbols[static_cast<std::size_t>(top.pos)];
    if (!cur.alive || cur.next < 0) continue;
    Symbol& right = symbols[static_cast<std::size_t>(cur.next)];
    const auto* m = lookup(cur.id, right.id);
    if (m == nullptr || m->second != top.new_id) continue;  // stale
    cur.id = top.new_id;
    right.alive = false;
    cur.next = right.next;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.pos;
    if (cur.prev >= 0) {
      if (const auto* p = lookup(symbols[static_cast<std::size_t>(cur.prev)].id, cur.id))
        queue.push(Merge{p->first, cur.prev, p->second});
    }
    if (cur.next >= 0) {
      if (const auto* p = lookup(cur.id, symbols[static_cast<std::size_t>(cur.next)].id))
        queue.push(Merge{p->first, top.pos, p->second});
    }
  }
  for (const Symbol& s : symbols)
    if (s.alive) out.push_back(s.id);
}

void HfTokenizer::run_decoders(std::vector<std::string>& tokens) const {
  for (const DecoderStep& step : decoder_) {
    switch (step.kind) {
      case DecoderStep::kReplace:
        for (std::string& t : tokens) replace_all(t, step.a, step.b);
        break;
      case DecoderStep::kByteFallback: {
        std::vector<std::string> next;
        next.reserve(tokens.size());
        std::string bytes;
        auto flush = [&] {
          if (bytes.empty()) return;
          bool valid = true;
          for (std::size_t i = 0; i < bytes.size() && valid;) {
            const std::size_t n = valid_utf8_len(std::string_view(bytes).substr(i));
            valid = n > 0;
            i += n;
          }
          if (valid) {
            next.push_back(bytes);
          } else {
            for (std::size_t i = 0; i < bytes.size(); ++i) next.emplace_back(kReplacementChar);
          }
          bytes.clear();
        };
        for (std::string& t : tokens) {
          int hi = -1, lo = -1;
          if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
            auto hex = [](char c) {
              if (c >= '0' && c <= '9') return c - '0';
              if (c >= 'A' && c <= 'F') return c - 'A' + 10;
              if (c >= 'a' && c <= 'f') return c - 'a' + 10;
              return -1;
            };
            hi = hex(t[3]);
            lo = hex(t[4]);
          }
          if (hi >= 0 && lo >= 0) {
            bytes.push_back(static_cast<char>(hi * 16 + lo));
          } else {
            flush();
            next.push_back(std::move(t));
          }
        }
        flush();
        tokens = std::move(next);
        break;
      }
      case DecoderStep::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case DecoderStep::kStrip:
        for (std::string& t : tokens) {
          std::string_view v = t;
          for (std::size_t k = 0; k < step.start && v.substr(0, step.a.size()) == step.a; ++k)
            v.remove_prefix(step.a.size());
          for (std::size_t k = 0;
               k < step.stop && v.size() >= step.a.size() && v.substr(v.size() - step.a.size()) == step.a;
               ++k)
            v.remove_suffix(step.a.size());
          t = std::string(v);
        }
        break;
      case DecoderStep::kMetaspace:
        for (std::size_t i = 0; i < tokens.size(); ++i)
          replace_all(tokens[i], step.a, (i == 0 && step.prepend != Prepend::kNever) ? "" : " ");
        break;
    }
  }
}

std::string HfTokenizer::decode(std::span<const TokenId> ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const TokenId id : ids) {
    const auto i = static_cast<std::size_t>(id);
    if (is_special_[i]) continue;  // like skip_special_tokens=True
    tokens.push_back(id_to_token_[i]);
  }
  std::string text;
  if (!has_decoder_) {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) text.push_back(' ');
      text += tokens[i];
    }
    return text;
  }
  run_decoders(tokens);
  for (const std::string& t : tokens) text += t;
  return text;
}

}  // namespace

std::shared_ptr<const TokenizerImpl> make_hf_tokenizer(std::string_view json_text, std::string source) {
  return std::make_shared<HfTokenizer>(json_text, std::move(source));
}

}  // namespace specdec::tokenizer::detail
