// Text <-> token ids for the Llama family of models, read by our own code:
//
//  * SentencePiece `tokenizer.model` (BPE, with or without byte fallback).
//    Encoding and decoding match libsentencepiece (checked token for token by
//    tests/tokenizer/tokenizer_oracle_test): normalization by the model's
//    normalizer spec (identity, or a precompiled charsmap such as nmt_nfkc),
//    whitespace escaped to U+2581 "▁", add_dummy_prefix,
//    remove_extra_whitespaces, user-defined symbols matched first, BPE merges
//    by piece score (highest first, leftmost on ties) with UNUSED pieces
//    resegmented, unknown characters to <0xXX> byte pieces (or one <unk> per
//    run of unknown characters without byte fallback).
//  * Hugging Face `tokenizer.json` with a "BPE" model (vocab + merges, byte
//    fallback, fuse_unk, ignore_merges), Llama-style normalizers (Sequence,
//    Prepend, Replace with a string pattern), Metaspace pre-tokenizer, added
//    tokens, and the Replace / ByteFallback / Fuse / Strip / Metaspace
//    decoders.
//
// Anything else (unigram/word/char SentencePiece models, byte-level or regex
// pre-tokenizers, NFKC in tokenizer.json, ...) throws specdec::TokenizerError
// at load time, naming the file and the unsupported feature.
//
// A Tokenizer is immutable once loaded; copies share the model, and encode /
// decode may be called from many threads at once.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/types.hpp"
#include "specdec/tokenizer/sentencepiece_model.hpp"

namespace specdec::tokenizer {

enum class TokenizerKind { kSentencePiece, kHuggingFace };

namespace detail {

// The format-specific implementation behind Tokenizer.
class TokenizerImpl {
 public:
  virtual ~TokenizerImpl() = default;
  virtual TokenizerKind kind() const noexcept = 0;
  // Appends the ids of `text` (no BOS) to `out`.
  virtual void encode(std::string_view text, std::vector<TokenId>& out) const = 0;
  virtual std::string decode(std::span<const TokenId> ids) const = 0;
  virtual const std::string& piece(TokenId id) const = 0;  // id already range-checked
  virtual std::optional<TokenId> piece_to_id(std::string_view piece) const = 0;
  virtual TokenId vocab_size() const noexcept = 0;
  virtual TokenId bos_id() const noexcept = 0;
  virtual TokenId eos_id() const noexcept = 0;
  virtual TokenId unk_id() const noexcept = 0;
  virtual TokenId pad_id() const noexcept = 0;
};

std::shared_ptr<const TokenizerImpl> make_sentencepiece_tokenizer(ModelProto model, std::string source);
std::shared_ptr<const TokenizerImpl> make_hf_tokenizer(std::string_view json, std::string source);

}  // namespace detail

class Tokenizer {
 public:
  // Loads `tokenizer.model` (SentencePiece protobuf) or `tokenizer.json`
  // (Hugging Face). Dispatch is on the extension (.model / .json); a directory
  // is searched for tokenizer.model, then tokenizer.json. Other names are
  // sniffed: a file starting with '{' is JSON, anything else protobuf.
  static Tokenizer load(const std::filesystem::path& path);
  // From an already parsed SentencePiece model; `source` names it in errors.
  static Tokenizer from_sentencepiece(ModelProto model, std::string source = "<memory>");
  // From the text of a tokenizer.json.
  static Tokenizer from_hf_json(std::string_view json, std::string source = "<memory>");

  // Token ids of `text`, with the BOS id first when `add_bos` (and the model
  // has one). Any byte string is accepted: invalid UTF-8 is handled as
  // SentencePiece does (each bad byte is U+FFFD before tokenization). Never
  // throws for a SentencePiece model; a tokenizer.json model with neither byte
  // fallback nor an unk_token throws TokenizerError on a character outside
  // its vocabulary, as `tokenizers` does.
  std::vector<TokenId> encode(std::string_view text, bool add_bos = false) const;
  // Appending form, for bulk pre-tokenization without reallocations.
  void encode_append(std::string_view text, bool add_bos, std::vector<TokenId>& out) const;

  // Text of `ids`: byte pieces reassembled into UTF-8 (invalid sequences as
  // U+FFFD), "▁" to space, the leading dummy-prefix space stripped, control
  // tokens (BOS/EOS/...) dropped. Throws TokenizerError for an id outside
  // [0, vocab_size()).
  std::string decode(std::span<const TokenId> ids) const;

  // The vocabulary entry of `id` as stored ("▁the", "<0x0A>", "<s>").
  // TokenizerError for an id out of range.
  std::string piece(TokenId id) const;
  std::optional<TokenId> piece_to_id(std::string_view piece) const;

  TokenId vocab_size() const noexcept { return impl_->vocab_size(); }
  // kNoToken (-1) where the model has none.
  TokenId bos_id() const noexcept { return impl_->bos_id(); }
  TokenId eos_id() const noexcept { return impl_->eos_id(); }
  TokenId unk_id() const noexcept { return impl_->unk_id(); }
  TokenId pad_id() const noexcept { return impl_->pad_id(); }
  TokenizerKind kind() const noexcept { return impl_->kind(); }

 private:
  explicit Tokenizer(std::shared_ptr<const detail::TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const detail::TokenizerImpl> impl_;
};

}  // namespace specdec::tokenizer

namespace specdec {
using tokenizer::Tokenizer;
}  // namespace specdec
