// A safetensors file (io::SafetensorsFile): the 8-byte header length, the
// JSON header (dtypes, shapes, data offsets, __metadata__) and the data
// section, then every tensor's info, bytes and view. The file is written to
// a temporary path per process: the reader maps files.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_target.hpp"
#include "specdec/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("specdec_fuzz_" + std::to_string(::getpid()) + ".safetensors");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  specdec::fuzz::expect_typed_errors([] {
    const specdec::io::SafetensorsFile file(path);
    unsigned sum = 0;
    for (const auto& name : file.names()) {
      const auto& info = file.info(name);
      (void)info.numel();
      const auto bytes = file.bytes(name);
      if (!bytes.empty()) sum += static_cast<unsigned>(bytes.front()) + static_cast<unsigned>(bytes.back());
      (void)file.is_aligned(name);
      specdec::fuzz::expect_typed_errors([&] { (void)file.view(name); });
    }
    for (const auto& [key, value] : file.metadata()) sum += static_cast<unsigned>(key.size() + value.size());
    volatile unsigned sink = sum;  // the bytes are read, not optimised away
    (void)sink;
  });
  return 0;
}
