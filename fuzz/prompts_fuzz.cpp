// A prompt set (io::read_prompts): JSON lines, each an object with a
// "prompt" string; any bytes, so lines that are not JSON, not objects, lack
// the field or hold it as another type, invalid UTF-8, empty files. The file
// is written to a temporary path per process.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_target.hpp"
#include "specdec/io/prompts.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("specdec_fuzz_" + std::to_string(::getpid()) + ".jsonl");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  specdec::fuzz::expect_typed_errors([] {
    std::size_t sum = 0;
    for (const auto& prompt : specdec::io::read_prompts(path, 1000)) sum += prompt.size();
    volatile std::size_t sink = sum;
    (void)sink;
  });
  return 0;
}
