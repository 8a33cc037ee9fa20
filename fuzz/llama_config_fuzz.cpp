// A Hugging Face config.json (io::parse_llama_config), then its JSON written
// back and parsed again: the round trip must give the same config.
#include <cstdint>
#include <cstdlib>

#include "fuzz_target.hpp"
#include "specdec/io/llama_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  specdec::fuzz::expect_typed_errors([&] {
    const auto config = specdec::io::parse_llama_config(specdec::fuzz::as_text(data, size), "fuzz");
    const auto json = specdec::io::llama_config_to_json(config);
    if (specdec::io::llama_config_to_json(specdec::io::parse_llama_config(json, "round trip")) != json)
      std::abort();  // a config does not survive its own JSON
  });
  return 0;
}
