// Tokenizer: format dispatch and the thin public wrapper.
#include "specdec/tokenizer/tokenizer.hpp"

#include <fmt/format.h>

#include "specdec/core/error.hpp"

namespace specdec::tokenizer {

namespace {

bool looks_like_json(std::string_view data) {
  for (const char c : data) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    return c == '{';
  }
  return false;
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    for (const char* name : {"tokenizer.model", "tokenizer.json"}) {
      if (std::filesystem::exists(path / name, ec)) return load(path / name);
    }
    throw TokenizerError(
        fmt::format("{}: directory has neither tokenizer.model nor tokenizer.json", path.string()));
  }
  const std::string data = read_file_bytes(path);
  if (data.empty()) throw TokenizerError(fmt::format("{}: empty file", path.string()));
  const std::string ext = path.extension().string();
  const bool json = ext == ".json" || (ext != ".model" && looks_like_json(data));
  if (json) return from_hf_json(data, path.string());
  return from_sentencepiece(parse_model_proto(data, path.string()), path.string());
}

Tokenizer Tokenizer::from_sentencepiece(ModelProto model, std::string source) {
  return Tokenizer(detail::make_sentencepiece_tokenizer(std::move(model), std::move(source)));
}

Tokenizer Tokenizer::from_hf_json(std::string_view json, std::string source) {
  return Tokenizer(detail::make_hf_tokenizer(json, std::move(source)));
}

void Tokenizer::encode_append(std::string_view text, bool add_bos, std::vector<TokenId>& out) const {
  if (add_bos && impl_->bos_id() >= 0) out.push_back(impl_->bos_id());
  impl_->encode(text, out);
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  encode_append(text, add_bos, out);
  return out;
}

std::string Tokenizer::decode(std::span<const TokenId> ids) const {
  const TokenId n = impl_->vocab_size();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n)
      throw TokenizerError(
          fmt::format("decode: token id {} at position {} is outside the "
                      "vocabulary [0, {})",
                      ids[i], i, n));
  }
  return impl_->decode(ids);
}

std::string Tokenizer::piece(TokenId id) const {
  if (id < 0 || id >= impl_->vocab_size())
    throw TokenizerError(
        fmt::format("piece: token id {} is outside the vocabulary [0, {})", id, impl_->vocab_size()));
  return impl_->piece(id);
}

std::optional<TokenId> Tokenizer::piece_to_id(std::string_view piece) const {
  return impl_->piece_to_id(piece);
}

}  // namespace specdec::tokenizer
