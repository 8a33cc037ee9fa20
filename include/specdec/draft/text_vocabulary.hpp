// A vocabulary as cross-vocabulary drafting sees it (Timor et al., ICML 2025,
// arXiv 2502.05202: SLEM and TLI): the bytes each token spells, its kind, and
// an encoder from bytes to tokens. The draft and the target each have one;
// VocabularyMap relates them. Backend- and tokenizer-free: a host builds one
// from its own tokenizer (specdec::tokenizer::text_vocabulary does it for
// ours, tokenizer/text_vocabulary.hpp), tests from a table.
//
// Encoding is byte-exact: encode(s) spells s again, whatever s holds.
// Complete UTF-8 runs go through the tokenizer's encoder; a byte that starts
// no valid UTF-8 character (half of a character split across two commits, a
// stray byte) becomes the vocabulary's byte token for it. An encoder that
// rewrites its input (normalization, a dummy-prefix space) is refused with a
// sentence at the first text it rewrites: the drafters keep the draft's
// tokens spelling exactly the target's text.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"
#include "specdec/tokenizer/text_util.hpp"

namespace specdec {

class TextVocabulary {
 public:
  enum class Kind : std::uint8_t {
    kText,     // spells its bytes (a SentencePiece piece, "▁" read as a space)
    kByte,     // one raw byte (byte fallback, "<0x0A>")
    kControl,  // spells nothing (<s>, </s>, <unk>, padding)
  };
  // Appends the tokens of `text` (complete UTF-8) to `out`.
  using Encoder = std::function<void(std::string_view text, std::vector<TokenId>& out)>;

  TextVocabulary() = default;
  // bytes[i] and kinds[i] describe token i; bos and eos are kNoToken where
  // the vocabulary has none. `name` names it in errors.
  TextVocabulary(std::string name, std::vector<std::string> bytes, std::vector<Kind> kinds, TokenId bos,
                 TokenId eos, Encoder encode)
      : name_(std::move(name)),
        bytes_(std::move(bytes)),
        kinds_(std::move(kinds)),
        bos_(bos),
        eos_(eos),
        encode_(std::move(encode)) {
    if (bytes_.empty() || bytes_.size() != kinds_.size())
      throw InvalidArgumentError(fmt::format("TextVocabulary {}: {} token spellings and {} kinds", name_,
                                             bytes_.size(), kinds_.size()));
    if (!encode_) throw InvalidArgumentError(fmt::format("TextVocabulary {}: no encoder", name_));
    for (const TokenId special : {bos_, eos_})
      if (special != kNoToken && (special < 0 || special >= size() || kind(special) != Kind::kControl))
        throw InvalidArgumentError(fmt::format(
            "TextVocabulary {}: BOS/EOS id {} is not a control token of the vocabulary", name_, special));
    byte_token_.fill(kNoToken);
    for (std::size_t i = 0; i < bytes_.size(); ++i) {
      if (kinds_[i] == Kind::kByte) {
        if (bytes_[i].size() != 1)
          throw InvalidArgumentError(
              fmt::format("TextVocabulary {}: byte token {} spells {} bytes", name_, i, bytes_[i].size()));
        auto& slot = byte_token_[static_cast<unsigned char>(bytes_[i][0])];
        if (slot == kNoToken) slot = static_cast<TokenId>(i);
      } else if (kinds_[i] == Kind::kControl && !bytes_[i].empty()) {
        throw InvalidArgumentError(fmt::format("TextVocabulary {}: control token {} spells text", name_, i));
      }
    }
  }

  const std::string& name() const { return name_; }
  std::int64_t size() const { return static_cast<std::int64_t>(bytes_.size()); }
  TokenId bos() const { return bos_; }
  TokenId eos() const { return eos_; }
  std::string_view bytes(TokenId id) const { return bytes_[checked(id)]; }
  Kind kind(TokenId id) const { return kinds_[checked(id)]; }
  // The byte token for `b`, kNoToken where there is none.
  TokenId byte_token(std::uint8_t b) const { return byte_token_[b]; }

  // Appends the bytes `ids` spell to `out`.
  void append_bytes(std::span<const TokenId> ids, std::string& out) const {
    for (const TokenId id : ids) out.append(bytes(id));
  }

  // Appends tokens spelling exactly `bytes` to `out` (see the file comment).
  void encode(std::string_view bytes, std::vector<TokenId>& out) const {
    while (!bytes.empty()) {
      std::size_t run = 0;  // the longest prefix of complete characters
      while (run < bytes.size()) {
        const auto n = tokenizer::detail::valid_utf8_len(bytes.substr(run));
        if (n == 0) break;
        run += n;
      }
      if (run > 0) {
        encode_run(bytes.substr(0, run), out);
        bytes.remove_prefix(run);
        continue;
      }
      const auto b = static_cast<std::uint8_t>(bytes[0]);
      if (byte_token_[b] == kNoToken)
        throw UnsupportedError(
            fmt::format("TextVocabulary {}: byte 0x{:02X} starts no UTF-8 character and the vocabulary has "
                        "no byte token for it",
                        name_, b));
      out.push_back(byte_token_[b]);
      bytes.remove_prefix(1);
    }
  }

 private:
  std::size_t checked(TokenId id) const {
    if (id < 0 || id >= size())
      throw InvalidArgumentError(
          fmt::format("TextVocabulary {}: token {} is outside [0, {})", name_, id, size()));
    return static_cast<std::size_t>(id);
  }

  void encode_run(std::string_view text, std::vector<TokenId>& out) const {
    const auto first = out.size();
    encode_(text, out);
    std::size_t at = 0;
    bool exact = true;
    for (auto i = first; i < out.size() && exact; ++i) {
      const auto piece = bytes(out[i]);
      exact = at + piece.size() <= text.size() && text.compare(at, piece.size(), piece) == 0;
      at += piece.size();
    }
    if (!exact || at != text.size())
      throw UnsupportedError(
          fmt::format("TextVocabulary {}: the encoder does not spell \"{}\" back (a normalizer or a dummy "
                      "prefix rewrites it); "
                      "cross-vocabulary drafting needs a byte-exact tokenizer",
                      name_, text.substr(0, 40)));
  }

  std::string name_;
  std::vector<std::string> bytes_;
  std::vector<Kind> kinds_;
  TokenId bos_ = kNoToken, eos_ = kNoToken;
  Encoder encode_;
  std::array<TokenId, 256> byte_token_{};
};

}  // namespace specdec
