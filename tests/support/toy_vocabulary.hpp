// Small vocabularies for the cross-vocabulary drafters' tests: pieces over a
// few letters, encoded by greedy longest match (so one string has several
// tokenizations, and a piece of one vocabulary can straddle two of the other);
// a character no piece spells falls back to byte tokens, as in SentencePiece.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/draft/text_vocabulary.hpp"
#include "specdec/tokenizer/text_util.hpp"

namespace specdec::testing {

// Pieces first (ids 0..n-1), then `controls` control tokens (BOS = n, EOS =
// n + 1 when there are two), then one byte token per byte in `byte_tokens`.
inline TextVocabulary toy_vocabulary(std::string name, std::vector<std::string> pieces, int controls = 0,
                                     std::string byte_tokens = {}) {
  std::vector<std::string> bytes = pieces;
  std::vector<TextVocabulary::Kind> kinds(pieces.size(), TextVocabulary::Kind::kText);
  for (int i = 0; i < controls; ++i) {
    bytes.emplace_back();
    kinds.push_back(TextVocabulary::Kind::kControl);
  }
  for (const char b : byte_tokens) {
    bytes.emplace_back(1, b);
    kinds.push_back(TextVocabulary::Kind::kByte);
  }
  const auto n = static_cast<TokenId>(pieces.size());
  const auto first_byte = n + controls;
  auto encode = [pieces = std::move(pieces), byte_tokens, first_byte](std::string_view text,
                                                                      std::vector<TokenId>& out) {
    while (!text.empty()) {
      TokenId best = kNoToken;
      std::size_t best_len = 0;
      for (std::size_t i = 0; i < pieces.size(); ++i)
        if (pieces[i].size() > best_len && text.starts_with(pieces[i])) {
          best = static_cast<TokenId>(i);
          best_len = pieces[i].size();
        }
      if (best == kNoToken) {  // byte fallback for the next character, as SentencePiece
        const auto len = std::max<std::size_t>(1, tokenizer::detail::valid_utf8_len(text));
        for (std::size_t i = 0; i < len && i < text.size(); ++i) {
          const auto at = byte_tokens.find(text[i]);
          if (at == std::string::npos) return;  // not spellable: the vocabulary refuses it
          out.push_back(first_byte + static_cast<TokenId>(at));
        }
        text.remove_prefix(std::min(len, text.size()));
        continue;
      }
      out.push_back(best);
      text.remove_prefix(best_len);
    }
  };
  return TextVocabulary(std::move(name), std::move(bytes), std::move(kinds), controls > 0 ? n : kNoToken,
                        controls > 1 ? n + 1 : kNoToken, std::move(encode));
}

// The pair the engine tests use: a target of 8 pieces (HashedContextModel's
// vocabulary of 8) and a draft of 6, sharing a, b, c and bc.
inline TextVocabulary toy_target_vocabulary() {
  return toy_vocabulary("toy target", {"a", "b", "c", "ab", "bc", "ca", "abc", "cc"});
}
inline TextVocabulary toy_draft_vocabulary() {
  return toy_vocabulary("toy draft", {"a", "b", "c", "bc", "cab", "aa"});
}

}  // namespace specdec::testing
