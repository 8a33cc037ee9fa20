// A token frequency file (io::read_token_frequencies: token_frequencies.json,
// from which an FR-Spec draft's hot vocabulary is drawn), written to a
// temporary path per process.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_target.hpp"
#include "specdec/io/token_frequencies.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("specdec_fuzz_" + std::to_string(::getpid()) + ".freq.json");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  specdec::fuzz::expect_typed_errors([] {
    for (const auto c : specdec::io::read_token_frequencies(path))
      if (c < 0) __builtin_trap();  // the reader promises non-negative counts
  });
  return 0;
}
