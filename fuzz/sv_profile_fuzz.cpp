// An SV profile file (io::read_sv_profile: the acceptance tables SV's
// scheduler reads back), written to a temporary path per process.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_target.hpp"
#include "specdec/io/sv_profile.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("specdec_fuzz_" + std::to_string(::getpid()) + ".sv.json");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  specdec::fuzz::expect_typed_errors([] { (void)specdec::io::read_sv_profile(path); });
  return 0;
}
