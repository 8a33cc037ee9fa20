#include "specdec/io/token_file.hpp"

#include <cstring>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/io/file_io.hpp"

namespace specdec::io {

std::vector<std::uint16_t> read_token_file(const std::filesystem::path& path) {
  const std::string bytes = read_text_file(path);
  if (bytes.size() % 2 != 0)
    throw ModelLoadError(
        fmt::format("{}: {} bytes is not a whole number of uint16 tokens", path.string(), bytes.size()));
  std::vector<std::uint16_t> tokens(bytes.size() / 2);
  std::memcpy(tokens.data(), bytes.data(), bytes.size());
  return tokens;
}

}  // namespace specdec::io
