#include "specdec/tokenizer/text_vocabulary.hpp"

#include <string_view>
#include <utility>
#include <vector>

#include "specdec/tokenizer/text_util.hpp"

namespace specdec::tokenizer {
namespace {

// "<0xHH>" (SentencePiece's byte pieces, upper-case hex) -> the byte; -1 otherwise.
int byte_piece_value(std::string_view piece) {
  if (piece.size() != 6 || !piece.starts_with("<0x") || piece[5] != '>') return -1;
  int v = 0;
  for (const char c : piece.substr(3, 2)) {
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= c - '0';
    else if (c >= 'A' && c <= 'F')
      v |= c - 'A' + 10;
    else
      return -1;
  }
  return v;
}

}  // namespace

TextVocabulary text_vocabulary(const Tokenizer& tokenizer, std::string name) {
  const auto n = tokenizer.vocab_size();
  std::vector<std::string> bytes(static_cast<std::size_t>(n));
  std::vector<TextVocabulary::Kind> kinds(static_cast<std::size_t>(n), TextVocabulary::Kind::kText);
  for (TokenId id = 0; id < n; ++id) {
    const auto i = static_cast<std::size_t>(id);
    if (id == tokenizer.bos_id() || id == tokenizer.eos_id() || id == tokenizer.unk_id() ||
        id == tokenizer.pad_id()) {
      kinds[i] = TextVocabulary::Kind::kControl;
      continue;
    }
    const auto piece = tokenizer.piece(id);
    if (const int b = byte_piece_value(piece); b >= 0) {
      kinds[i] = TextVocabulary::Kind::kByte;
      bytes[i].assign(1, static_cast<char>(b));
      continue;
    }
    std::string_view rest = piece;
    for (auto at = rest.find(detail::kSpaceSymbol); at != std::string_view::npos;
         at = rest.find(detail::kSpaceSymbol)) {
      bytes[i].append(rest.substr(0, at)).push_back(' ');
      rest.remove_prefix(at + detail::kSpaceSymbol.size());
    }
    bytes[i].append(rest);
  }
  return TextVocabulary(std::move(name), std::move(bytes), std::move(kinds), tokenizer.bos_id(),
                        tokenizer.eos_id(), [tokenizer](std::string_view text, std::vector<TokenId>& out) {
                          tokenizer.encode_append(text, false, out);
                        });
}

}  // namespace specdec::tokenizer
