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

std::vector<TokenId> fill_to_context(std::span<const TokenId> prompt, std::span<const TokenId> text,
                                     TokenId bos, std::int64_t context, std::int64_t max_new_tokens,
                                     std::size_t request, const std::string& text_name) {
  if (context <= max_new_tokens)
    throw InvalidArgumentError(
        fmt::format("context {} leaves no prompt before {} new tokens", context, max_new_tokens));
  auto body = prompt.subspan(!prompt.empty() && prompt.front() == bos ? 1 : 0);
  const auto room = context - max_new_tokens - 1;  // after BOS
  if (static_cast<std::int64_t>(body.size()) > room) body = body.last(static_cast<std::size_t>(room));
  const auto need = room - static_cast<std::int64_t>(body.size());
  if (need > static_cast<std::int64_t>(text.size()))
    throw InvalidArgumentError(
        fmt::format("{} holds {} tokens; context {} needs {}", text_name, text.size(), context, need));
  const auto span = static_cast<std::size_t>(static_cast<std::int64_t>(text.size()) - need + 1);
  const auto start = static_cast<std::ptrdiff_t>((request * 997) % span);  // 997 is prime: starts spread
  std::vector<TokenId> out{bos};
  out.insert(out.end(), text.begin() + start, text.begin() + start + need);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

}  // namespace specdec::io
