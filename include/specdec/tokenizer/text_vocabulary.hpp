// A Tokenizer as cross-vocabulary drafting reads it (draft/text_vocabulary.hpp):
// each piece's bytes ("▁" as a space, "<0xHH>" as that byte, BOS/EOS/UNK/pad
// as control tokens spelling nothing) and its encoder.
#pragma once

#include <string>

#include "specdec/draft/text_vocabulary.hpp"
#include "specdec/tokenizer/tokenizer.hpp"

namespace specdec::tokenizer {

// `name` names the vocabulary in errors (e.g. the tokenizer's path). The
// vocabulary keeps a copy of the tokenizer (copies share the model).
TextVocabulary text_vocabulary(const Tokenizer& tokenizer, std::string name);

}  // namespace specdec::tokenizer
