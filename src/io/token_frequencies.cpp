#include "specdec/io/token_frequencies.hpp"

#include <cstdint>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "specdec/core/error.hpp"
#include "specdec/io/file_io.hpp"

namespace specdec::io {

std::vector<std::int64_t> read_token_frequencies(const std::filesystem::path& path) {
  const std::string where = path.string();
  std::string text;
  try {
    text = read_text_file(path);
  } catch (const ModelLoadError& e) {
    throw ModelLoadError(fmt::format(
        "{} (write one with `specdec hot-tokens --tokens <training tokens> --out {}`)", e.what(), where));
  }
  std::vector<std::int64_t> counts;
  try {
    const auto j = nlohmann::json::parse(text);
    if (!j.is_object() || !j.contains("counts") || !j.at("counts").is_array())
      throw ModelLoadError(fmt::format("{}: not a token frequency file: no \"counts\" array", where));
    const auto& c = j.at("counts");
    counts.reserve(c.size());
    for (const auto& v : c) {
      if (!v.is_number_integer())
        throw ModelLoadError(
            fmt::format("{}: count {} is {}, not an integer", where, counts.size(), v.type_name()));
      if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
        throw ModelLoadError(fmt::format("{}: count {} is too large", where, counts.size()));
      const auto n = v.get<std::int64_t>();
      if (n < 0)
        throw ModelLoadError(fmt::format("{}: count {} (token {}) is negative", where, n, counts.size()));
      counts.push_back(n);
    }
  } catch (const nlohmann::json::exception& e) {
    throw ModelLoadError(fmt::format("{}: not a token frequency file: {}", where, e.what()));
  }
  return counts;
}

void write_token_frequencies(const std::filesystem::path& path, std::span<const std::int64_t> counts,
                             std::span<const TokenId> hot) {
  const nlohmann::json j{{"counts", std::vector<std::int64_t>(counts.begin(), counts.end())},
                         {"hot", std::vector<TokenId>(hot.begin(), hot.end())}};
  write_text_atomically(path, j.dump() + "\n");
}

}  // namespace specdec::io
