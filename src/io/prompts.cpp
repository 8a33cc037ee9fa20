#include "specdec/io/prompts.hpp"

#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "specdec/core/error.hpp"

namespace specdec::io {

std::vector<std::string> read_prompts(const std::filesystem::path& path, std::int64_t limit) {
  std::ifstream in(path);
  if (!in) throw IoError(fmt::format("{}: cannot open the prompt set", path.string()));
  std::vector<std::string> out;
  std::string line;
  for (std::int64_t n = 1; std::getline(in, line) && static_cast<std::int64_t>(out.size()) < limit; ++n) {
    if (line.empty()) continue;
    try {
      out.push_back(nlohmann::json::parse(line).at("prompt").get<std::string>());
    } catch (const nlohmann::json::exception& e) {
      throw IoError(
          fmt::format("{}:{}: not a JSON object with a \"prompt\" string ({})", path.string(), n, e.what()));
    }
  }
  if (out.empty()) throw IoError(fmt::format("{}: no prompts", path.string()));
  return out;
}

}  // namespace specdec::io
