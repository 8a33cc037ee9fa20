// Prompt sets: JSON lines, each an object with a "prompt" string (the files
// under data/prompts/, and what `specdec bench` and `profile-sv` read).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace specdec::io {

// The "prompt" field of each non-empty line of `path`, the first `limit` of
// them. IoError naming the file (and the line) when it cannot be read, a
// line is not a JSON object with a "prompt" string, or it holds no prompt.
std::vector<std::string> read_prompts(const std::filesystem::path& path, std::int64_t limit);

}  // namespace specdec::io
