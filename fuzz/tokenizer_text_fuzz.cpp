// Prompt text, any bytes, through a SentencePiece tokenizer (the project's
// llama-style test model): encoding never throws for SentencePiece, every
// id is in the vocabulary, and decoding the ids works.
#include <cstdint>
#include <cstdlib>

#include "fuzz_target.hpp"
#include "specdec/tokenizer/tokenizer.hpp"

#ifndef SPECDEC_FUZZ_TOKENIZER_MODEL
#error "SPECDEC_FUZZ_TOKENIZER_MODEL: the path of a SentencePiece model"
#endif

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto tokenizer = specdec::Tokenizer::load(SPECDEC_FUZZ_TOKENIZER_MODEL);
  const auto ids = tokenizer.encode(specdec::fuzz::as_text(data, size), true);
  for (const auto id : ids)
    if (id < 0 || id >= tokenizer.vocab_size()) std::abort();
  (void)tokenizer.decode(ids);
  return 0;
}
