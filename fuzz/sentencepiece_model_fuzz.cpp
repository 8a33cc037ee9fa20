// A SentencePiece tokenizer.model (our protobuf reader,
// tokenizer::parse_model_proto), then a tokenizer built from it encoding
// and decoding a fixed text.
#include <cstdint>
#include <string>

#include "fuzz_target.hpp"
#include "specdec/tokenizer/sentencepiece_model.hpp"
#include "specdec/tokenizer/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  specdec::fuzz::expect_typed_errors([&] {
    auto model = specdec::tokenizer::parse_model_proto(specdec::fuzz::as_text(data, size), "fuzz");
    const auto tokenizer = specdec::Tokenizer::from_sentencepiece(std::move(model), "fuzz");
    const auto ids = tokenizer.encode("Hello, wörld!\n  Ünïcode 漢字 <s> 123", true);
    (void)tokenizer.decode(ids);
  });
  return 0;
}
