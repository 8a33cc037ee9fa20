// SentencePiece BPE tokenizer, written from the algorithm so that it agrees
// with libsentencepiece token for token (see tokenizer.hpp for the list of
// behaviours). Nothing here links libsentencepiece or libprotobuf.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "specdec/core/error.hpp"
#include "specdec/tokenizer/sentencepiece_model.hpp"
#include "specdec/tokenizer/text_util.hpp"
#include "specdec/tokenizer/tokenizer.hpp"

namespace specdec::tokenizer::detail {

namespace {

// A precompiled normalization rule set (NormalizerSpec.precompiled_charsmap):
// a little-endian uint32 trie size, a darts-clone double-array trie over the
// source strings whose values are offsets into the blob of NUL-terminated
// replacement strings that follows.
class CharsMap {
 public:
  CharsMap() = default;
  CharsMap(std::string_view blob, std::string_view source) {
    if (blob.size() < 4)
      throw TokenizerError(
          fmt::format("{}: normalizer precompiled_charsmap is {} bytes, too "
                      "short for its header",
                      source, blob.size()));
    std::uint32_t trie_size = 0;
    for (int i = 0; i < 4; ++i)
      trie_size |= static_cast<std::uint32_t>(static_cast<unsigned char>(blob[i])) << (8 * i);
    if (trie_size > blob.size() - 4 || trie_size % 4 != 0 || trie_size == 0)
      throw TokenizerError(
          fmt::format("{}: normalizer precompiled_charsmap has a bad trie size "
                      "{} (blob is {} bytes)",
                      source, trie_size, blob.size()));
    units_.resize(trie_size / 4);
    for (std::size_t u = 0; u < units_.size(); ++u) {
      std::uint32_t v = 0;
      for (std::size_t i = 0; i < 4; ++i)
        v |= static_cast<std::uint32_t>(static_cast<unsigned char>(blob[4 + 4 * u + i])) << (8 * i);
      units_[u] = v;
    }
    normalized_ = std::string(blob.substr(4 + trie_size));
  }

  bool empty() const noexcept { return units_.empty(); }

  // Longest rule matching a prefix of `in`: {bytes consumed, replacement}.
  // {0, {}} when none does.
  std::pair<std::size_t, std::string_view> longest_prefix(std::string_view in) const noexcept {
    std::size_t best_len = 0;
    std::uint32_t best_value = 0;
    std::size_t id = offset(units_[0]);
    for (std::size_t i = 0; i < in.size(); ++i) {
      const auto c = static_cast<unsigned char>(in[i]);
      id ^= c;
      if (id >= units_.size()) break;
      const std::uint32_t unit = units_[id];
      if (label(unit) != c) break;
      id ^= offset(unit);
      if (id >= units_.size()) break;
      if (has_leaf(unit)) {
        best_len = i + 1;
        best_value = units_[id] & 0x7FFFFFFFu;
      }
    }
    if (best_len == 0 || best_value >= normalized_.size()) return {0, {}};
    const std::size_t end = normalized_.find('\0', best_value);
    const std::size_t n = (end == std::string::npos ? normalized_.size() : end) - best_value;
    return {best_len, std::string_view(normalized_).substr(best_value, n)};
  }

 private:
  static bool has_leaf(std::uint32_t u) noexcept { return ((u >> 8) & 1) == 1; }
  static std::uint32_t label(std::uint32_t u) noexcept { return u & ((1u << 31) | 0xFFu); }
  static std::size_t offset(std::uint32_t u) noexcept {
    return static_cast<std::size_t>((u >> 10) << ((u & (1u << 9)) >> 6));
  }

  std::vector<std::uint32_t> units_;
  std::string normalized_;
};

bool parse_byte_piece(std::string_view p, int& byte) {
  // "<0xXX>" with upper-case hex digits, as SentencePiece writes them.
  if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return false;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(p[3]), lo = hex(p[4]);
  if (hi < 0 || lo < 0) return false;
  byte = hi * 16 + lo;
  return true;
}

class SentencePieceTokenizer final : public TokenizerImpl {
 public:
  SentencePieceTokenizer(ModelProto model, std::string source);
  // The lookup tables point into pieces_: the object stays where it was built.
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  TokenizerKind kind() const noexcept override { return TokenizerKind::kSentencePiece; }
  void encode(std::string_view text, std::vector<TokenId>& out) const override;
  std::string decode(std::span<const TokenId> ids) const override;
  const std::string& piece(TokenId id) const override { return pieces_[id].piece; }
  std::optional<TokenId> piece_to_id(std::string_view piece) const override {
    TokenId id = reserved_.find(piece);
    if (id < 0) id = normal_.find(piece);
    if (id < 0) return std::nullopt;
    return id;
  }
  TokenId vocab_size() const noexcept override { return static_cast<TokenId>(pieces_.size()); }
  TokenId bos_id() const noexcept override { return bos_id_; }
  TokenId eos_id() const noexcept override { return eos_id_; }
  TokenId unk_id() const noexcept override { return public_unk_id_; }
  TokenId pad_id() const noexcept override { return pad_id_; }

 private:
  // libsentencepiece's PieceToId: reserved pieces first, then normal ones,
  // and <unk> for anything else.
  TokenId lookup(std::string_view piece) const noexcept {
    TokenId id = reserved_.find(piece);
    if (id < 0) id = normal_.find(piece);
    return id < 0 ? unk_id_ : id;
  }
  TokenId special_id(const std::string& piece, PieceType want) const noexcept {
    const TokenId id = lookup(piece);
    return pieces_[id].type == want ? id : kNoToken;
  }
  // Longest user-defined symbol at the start of `s` (0 if none).
  std::size_t match_user_defined(std::string_view s) const noexcept;
  std::pair<std::string_view, std::size_t> normalize_prefix(std::string_view in) const noexcept;
  std::string normalize(std::string_view text) const;

  struct Symbol {
    std::uint32_t begin;
    std::uint32_t len;  // 0 once merged into its left neighbour
    std::int32_t prev;
    std::int32_t next;
    TokenId id;   // -1: look the piece up when emitting
    bool freeze;  // user-defined symbol: never merged
  };
  struct Candidate {
    float score;
    std::int32_t left;
    std::int32_t right;
    std::uint32_t len;  // len(left) + len(right) when pushed
    TokenId id;
  };
  struct Scratch {
    std::vector<Symbol> symbols;
    std::vector<Candidate> heap;
  };
  struct Emitter;
  void bpe(std::string_view text, Scratch& scratch, Emitter& emit) const;

  std::string source_;
  std::vector<SentencePiece> pieces_;
  StringIdMap normal_;    // NORMAL, USER_DEFINED, UNUSED
  StringIdMap reserved_;  // UNKNOWN, CONTROL, BYTE
  std::array<TokenId, 256> byte_ids_{};
  std::vector<std::uint8_t> byte_of_id_;                           // the byte of each BYTE piece
  std::array<std::vector<std::string_view>, 256> user_defined_{};  // by first byte
  bool has_user_defined_ = false;
  bool byte_fallback_ = false;
  bool add_dummy_prefix_ = true;
  bool remove_extra_whitespaces_ = true;
  bool escape_whitespaces_ = true;
  std::size_t max_piece_bytes_ = 0;
  std::array<TokenId, 128> char_id_{};      // lookup() of each ASCII character
  std::array<bool, 128> isolated_{};        // ASCII bytes no multi-character piece contains
  bool pieces_have_reserved_twin_ = false;  // a normal piece's text is also a reserved piece
  CharsMap charsmap_;
  std::string unk_surface_;
  TokenId unk_id_ = kNoToken;  // the UNKNOWN piece
  TokenId public_unk_id_ = kNoToken, bos_id_ = kNoToken, eos_id_ = kNoToken, pad_id_ = kNoToken;
};

SentencePieceTokenizer::SentencePieceTokenizer(ModelProto model, std::string source)
    : source_(std::move(source)), pieces_(std::move(model.pieces)) {
  const TrainerSpec& ts = model.trainer_spec;
  const NormalizerSpec& ns = model.normalizer_spec;
  if (ts.model_type != ModelType::kBpe)
    throw TokenizerError(
        fmt::format("{}: unsupported SentencePiece model type {} (only BPE is "
                    "implemented)",
                    source_, to_string(ts.model_type)));
  if (ts.treat_whitespace_as_suffix)
    throw TokenizerError(
        fmt::format("{}: unsupported trainer option treat_whitespace_as_suffix=true", source_));
  if (model.denormalizer_spec && !model.denormalizer_spec->precompiled_charsmap.empty())
    throw TokenizerError(
        fmt::format("{}: unsupported denormalizer (a precompiled_charsmap in "
                    "denormalizer_spec, rule '{}')",
                    source_, model.denormalizer_spec->name));
  if (pieces_.empty()) throw TokenizerError(fmt::format("{}: model has no pieces", source_));
  if (pieces_.size() > static_cast<std::size_t>(std::numeric_limits<TokenId>::max()))
    throw TokenizerError(fmt::format("{}: {} pieces is too many", source_, pieces_.size()));
  if (!ns.precompiled_charsmap.empty()) charsmap_ = CharsMap(ns.precompiled_charsmap, source_);
  byte_fallback_ = ts.byte_fallback;
  add_dummy_prefix_ = ns.add_dummy_prefix;
  remove_extra_whitespaces_ = ns.remove_extra_whitespaces;
  escape_whitespaces_ = ns.escape_whitespaces;
  unk_surface_ = ts.unk_surface;
  byte_ids_.fill(kNoToken);
  byte_of_id_.assign(pieces_.size(), 0);

  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    const auto id = static_cast<TokenId>(i);
    const SentencePiece& p = pieces_[i];
    if (p.piece.empty()) throw TokenizerError(fmt::format("{}: piece {} is empty", source_, i));
    const bool normal =
        p.type == PieceType::kNormal || p.type == PieceType::kUserDefined || p.type == PieceType::kUnused;
    StringIdMap& map = normal ? normal_ : reserved_;
    if (!map.insert(p.piece, id))
      throw TokenizerError(fmt::format("{}: piece '{}' is defined twice (ids {} and {})", source_, p.piece,
                                       map.find(p.piece), id));
    if (normal) max_piece_bytes_ = std::max(max_piece_bytes_, p.piece.size());
    switch (p.type) {
      case PieceType::kUserDefined:
        user_defined_[static_cast<unsigned char>(p.piece[0])].push_back(p.piece);
        has_user_defined_ = true;
        break;
      case PieceType::kUnknown:
        if (unk_id_ >= 0)
          throw TokenizerError(
              fmt::format("{}: more than one UNKNOWN piece (ids {} and {})", source_, unk_id_, id));
        unk_id_ = id;
        break;
      case PieceType::kByte: {
        int b = 0;
        if (!ts.byte_fallback)
          throw TokenizerError(
              fmt::format("{}: byte piece '{}' (id {}) although byte_fallback "
                          "is false",
                          source_, p.piece, id));
        if (!parse_byte_piece(p.piece, b))
          throw TokenizerError(
              fmt::format("{}: byte piece '{}' (id {}) is not of the form <0xXX>", source_, p.piece, id));
        byte_ids_[static_cast<std::size_t>(b)] = id;
        byte_of_id_[i] = static_cast<std::uint8_t>(b);
        break;
      }
      default:
        break;
    }
  }
  if (unk_id_ < 0) throw TokenizerError(fmt::format("{}: model has no UNKNOWN piece", source_));
  if (byte_fallback_) {
    for (int b = 0; b < 256; ++b)
      if (byte_ids_[static_cast<std::size_t>(b)] < 0)
        throw TokenizerError(
            fmt::format("{}: byte_fallback is true but byte piece <0x{:02X}> "
                        "is missing",
                        source_, b));
  }
  for (auto& v : user_defined_)  // longest first
    std::sort(v.begin(), v.end(), [](std::string_view a, std::string_view b) { return a.size() > b.size(); });
  for (std::size_t c = 0; c < 128; ++c) {
    const char ch = static_cast<char>(c);
    char_id_[c] = lookup(std::string_view(&ch, 1));
    isolated_[c] = true;
  }
  for (const SentencePiece& p : pieces_) {
    const bool normal =
        p.type == PieceType::kNormal || p.type == PieceType::kUserDefined || p.type == PieceType::kUnused;
    if (!normal) continue;
    if (reserved_.find(p.piece) >= 0) pieces_have_reserved_twin_ = true;
    if (p.piece.size() < 2) continue;
    for (const char ch : p.piece)
      if (static_cast<unsigned char>(ch) < 0x80) isolated_[static_cast<unsigned char>(ch)] = false;
  }
  // libsentencepiece's unk_id()/bos_id()/...: the id of the named piece if it
  // has the expected type, else -1. (Encoding uses the UNKNOWN piece, unk_id_.)
  public_unk_id_ = special_id(ts.unk_piece, PieceType::kUnknown);
  bos_id_ = special_id(ts.bos_piece, PieceType::kControl);
  eos_id_ = special_id(ts.eos_piece, PieceType::kControl);
  pad_id_ = special_id(ts.pad_piece, PieceType::kControl);
}

std::size_t SentencePieceTokenizer::match_user_defined(std::string_view s) const noexcept {
  for (std::string_view u : user_defined_[static_cast<unsigned char>(s[0])])
    if (u.size() <= s.size() && s.substr(0, u.size()) == u) return u.size();
  return 0;
}

// One normalization step, as libsentencepiece's Normalizer::NormalizePrefix:
// a user-defined symbol verbatim, else the longest charsmap rule, else one
// UTF-8 character (an invalid byte becomes U+FFFD).
std::pair<std::string_view, std::size_t> SentencePieceTokenizer::normalize_prefix(
    std::string_view in) const noexcept {
  if (has_user_defined_) {
    const std::size_t n = match_user_defined(in);
    if (n > 0) return {in.substr(0, n), n};
  }
  if (!charsmap_.empty()) {
    const auto [n, rep] = charsmap_.longest_prefix(in);
    if (n > 0) return {rep, n};
  }
  const std::size_t n = valid_utf8_len(in);
  if (n == 0) return {kReplacementChar, 1};
  return {in.substr(0, n), n};
}

std::string SentencePieceTokenizer::normalize(std::string_view in) const {
  std::string out;
  if (remove_extra_whitespaces_) {  // drop leading whitespace
    while (!in.empty()) {
      const auto [sp, n] = normalize_prefix(in);
      if (sp != " ") break;
      in.remove_prefix(n);
    }
  }
  if (in.empty()) return out;
  out.reserve(in.size() + in.size() / 2 + 3);
  const std::string_view space = escape_whitespaces_ ? kSpaceSymbol : std::string_view(" ");
  if (add_dummy_prefix_) out.append(space);

  // Fast path for the common case: no rules that can rewrite the input.
  const bool plain = !has_user_defined_ && charsmap_.empty();
  bool prev_space = remove_extra_whitespaces_;
  while (!in.empty()) {
    std::string_view sp;
    std::size_t consumed;
    const auto c = static_cast<unsigned char>(in[0]);
    if (plain && c < 0x80) {
      sp = in.substr(0, 1);
      consumed = 1;
    } else {
      std::tie(sp, consumed) = normalize_prefix(in);
    }
    if (prev_space)
      while (!sp.empty() && sp[0] == ' ') sp.remove_prefix(1);
    if (!sp.empty()) {
      for (const char ch : sp) {
        if (ch == ' ' && escape_whitespaces_)
          out.append(kSpaceSymbol);
        else
          out.push_back(ch);
      }
      prev_space = sp.back() == ' ';
    }
    in.remove_prefix(consumed);
    if (!remove_extra_whitespaces_) prev_space = false;
  }
  if (remove_extra_whitespaces_) {  // drop trailing whitespace
    while (out.size() >= space.size() && std::string_view(out).substr(out.size() - space.size()) == space)
      out.resize(out.size() - space.size());
  }
  return out;
}

// Appends final pieces: UNUSED pieces are split back into the pieces they
// were merged from; an unknown piece becomes its UTF-8 bytes (byte fallback)
// or one <unk> per run of unknown pieces.
struct SentencePieceTokenizer::Emitter {
  const SentencePieceTokenizer& tok;
  std::vector<TokenId>& out;
  bool prev_unk = false;
  const std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>>* rev_merge =
      nullptr;

  // `id`: the piece's id when known (>= 0), else looked up.
  void single(std::string_view w, TokenId id) {
    if (id < 0) id = tok.lookup(w);
    const PieceType type = tok.pieces_[static_cast<std::size_t>(id)].type;
    if (type == PieceType::kUnused && rev_merge != nullptr) {
      const auto it = rev_merge->find(w);
      if (it != rev_merge->end()) {
        single(it->second.first, -1);
        single(it->second.second, -1);
        return;
      }
    }
    if (type == PieceType::kUnknown) {
      if (tok.byte_fallback_) {
        for (const char b : w) out.push_back(tok.byte_ids_[static_cast<unsigned char>(b)]);
      } else if (!prev_unk) {
        out.push_back(id);
      }
      prev_unk = true;
      return;
    }
    out.push_back(id);
    prev_unk = false;
  }
};

void SentencePieceTokenizer::encode(std::string_view text, std::vector<TokenId>& out) const {
  const std::string normalized = normalize(text);
  if (normalized.empty()) return;
  // A byte that no multi-character piece contains is never merged: BPE on
  // the stretches between such bytes is independent, so a long document
  // (lines joined by '\n') costs what its lines cost.
  Emitter emit{*this, out};
  thread_local Scratch scratch;  // reused between calls on a thread
  const std::string_view v = normalized;
  std::size_t start = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto c = static_cast<unsigned char>(v[i]);
    if (c >= 0x80 || !isolated_[c]) continue;
    if (i > start) bpe(v.substr(start, i - start), scratch, emit);
    emit.single(v.substr(i, 1), char_id_[c]);
    start = i + 1;
  }
  if (start < v.size()) bpe(v.substr(start), scratch, emit);
  if (scratch.symbols.capacity() > (std::size_t{1} << 20)) scratch = Scratch{};
}

// BPE as libsentencepiece's bpe_model: the text starts as one symbol per
// character (a user-defined symbol is one frozen symbol); repeatedly merge the
// adjacent pair whose concatenation is a vocabulary piece with the highest
// score, the leftmost on ties. Symbols form a linked list; candidate pairs
// live in a max-heap and are checked for staleness when popped, so n
// characters cost O(n log n).
void SentencePieceTokenizer::bpe(std::string_view text, Scratch& scratch, Emitter& emit) const {
  auto& symbols = scratch.symbols;
  auto& heap = scratch.heap;
  symbols.clear();
  heap.clear();
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t n = 0;
    bool freeze = false;
    if (has_user_defined_) {
      n = match_user_defined(text.substr(pos));
      freeze = n > 0;
    }
    TokenId id = -1;
    if (n == 0) {
      const auto c = static_cast<unsigned char>(text[pos]);
      n = std::min(text.size() - pos, utf8_lead_len(c));
      if (c < 0x80) id = char_id_[c];
    }
    const auto index = static_cast<std::int32_t>(symbols.size());
    symbols.push_back(Symbol{static_cast<std::uint32_t>(pos), static_cast<std::uint32_t>(n), index - 1,
                             index + 1, id, freeze});
    pos += n;
  }
  symbols.back().next = -1;

  // For UNUSED pieces: the pair a merged piece was last formed from.
  std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> rev_merge;
  auto view = [&](const Symbol& s) { return text.substr(s.begin, s.len); };
  const auto lower = [](const Candidate& a, const Candidate& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  auto maybe_add = [&](std::int32_t left, std::int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<std::size_t>(left)];
    const Symbol& r = symbols[static_cast<std::size_t>(right)];
    if (l.freeze || r.freeze) return;
    const std::size_t len = std::size_t{l.len} + r.len;
    if (len > max_piece_bytes_) return;
    const std::string_view merged = text.substr(l.begin, len);
    const TokenId id = normal_.find(merged);
    if (id < 0) return;
    const SentencePiece& p = pieces_[static_cast<std::size_t>(id)];
    heap.push_back(Candidate{p.score, left, right, static_cast<std::uint32_t>(len), id});
    std::push_heap(heap.begin(), heap.end(), lower);
    if (p.type == PieceType::kUnused) rev_merge[merged] = {view(l), view(r)};
  };

  for (std::size_t i = 1; i < symbols.size(); ++i)
    maybe_add(static_cast<std::int32_t>(i - 1), static_cast<std::int32_t>(i));

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), lower);
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& l = symbols[static_cast<std::size_t>(top.left)];
    Symbol& r = symbols[static_cast<std::size_t>(top.right)];
    if (l.len == 0 || r.len == 0 || l.len + r.len != top.len) continue;  // stale
    l.len += r.len;
    l.id = pieces_have_reserved_twin_ ? -1 : top.id;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<std::size_t>(r.next)].prev = top.left;
    r.len = 0;
    maybe_add(l.prev, top.left);
    maybe_add(top.left, l.next);
  }

  emit.rev_merge = rev_merge.empty() ? nullptr : &rev_merge;
  for (std::int32_t i = 0; i >= 0; i = symbols[static_cast<std::size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<std::size_t>(i)];
    emit.single(view(s), s.id);
  }
  emit.rev_merge = nullptr;
}

// As libsentencepiece's Decode: control pieces vanish, <unk> becomes the
// unk surface (" ⁇ "), runs of byte pieces are reassembled into UTF-8 (each
// byte that does not start a valid character becomes U+FFFD), "▁" becomes a
// space, and the first piece's leading "▁" (the dummy prefix) is dropped when
// add_dummy_prefix or remove_extra_whitespaces is on.
std::string SentencePieceTokenizer::decode(std::span<const TokenId> ids) const {
  std::string text;
  std::string bytes;
  const bool strip_bos_ws = add_dummy_prefix_ || remove_extra_whitespaces_;
  bool is_bos_ws = true;
  bool bos_ws_seen = false;
  auto flush = [&] {
    if (bytes.empty()) return;
    append_utf8_replacing_invalid(bytes, text);
    bytes.clear();
  };
  for (const TokenId id : ids) {
    const SentencePiece& p = pieces_[static_cast<std::size_t>(id)];
    if (p.type == PieceType::kByte) {
      bytes.push_back(static_cast<char>(byte_of_id_[static_cast<std::size_t>(id)]));
      continue;
    }
    flush();
    if (bos_ws_seen || !text.empty()) is_bos_ws = false;
    bos_ws_seen = false;
    if (p.type == PieceType::kControl) continue;
    if (p.type == PieceType::kUnknown) {
      text.append(unk_surface_);
      continue;
    }
    std::string_view piece = p.piece;
    if (is_bos_ws && strip_bos_ws && piece.substr(0, kSpaceSymbol.size()) == kSpaceSymbol) {
      piece.remove_prefix(kSpaceSymbol.size());
      bos_ws_seen = !remove_extra_whitespaces_;
    }
    for (std::size_t pos = 0;;) {
      const std::size_t hit = piece.find(kSpaceSymbol, pos);
      if (hit == std::string_view::npos) {
        text.append(piece.substr(pos));
        break;
      }
      text.append(piece.substr(pos, hit - pos));
      text.push_back(' ');
      pos = hit + kSpaceSymbol.size();
    }
  }
  flush();
  return text;
}

}  // namespace

std::shared_ptr<const TokenizerImpl> make_sentencepiece_tokenizer(ModelProto model, std::string source) {
  return std::make_shared<SentencePieceTokenizer>(std::move(model), std::move(source));
}

}  // namespace specdec::tokenizer::detail
