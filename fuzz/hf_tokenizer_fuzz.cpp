// A Hugging Face tokenizer.json (Tokenizer::from_hf_json), then the
// tokenizer encoding and decoding a fixed text.
#include <cstdint>

#include "fuzz_target.hpp"
#include "specdec/tokenizer/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  specdec::fuzz::expect_typed_errors([&] {
    const auto tokenizer = specdec::Tokenizer::from_hf_json(specdec::fuzz::as_text(data, size), "fuzz");
    const auto ids = tokenizer.encode("Hello, wörld!\n  Ünïcode 漢字 <s> 123", true);
    (void)tokenizer.decode(ids);
  });
  return 0;
}
