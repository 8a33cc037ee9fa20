// Prompt sets: JSON lines, each an object with a "prompt" string (the files
// under data/prompts/, and what `specdec bench` and `profile-sv` read).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/types.hpp"

namespace specdec::io {

// The "prompt" field of each non-empty line of `path`, the first `limit` of
// them. IoError naming the file (and the line) when it cannot be read, a
// line is not a JSON object with a "prompt" string, or it holds no prompt.
std::vector<std::string> read_prompts(const std::filesystem::path& path, std::int64_t limit);

// Request `request`'s prompt for a long-context run (SPIRe's grid, arXiv
// 2504.06419 §4): filled from the front so that `max_new_tokens` generated
// tokens end at `context`. BOS, then a stretch of `text` (held-out tokens;
// request i's starts 997 i tokens in, modulo the room, so the requests'
// stretches differ), then the prompt without its BOS (its last tokens, if it
// alone is longer). InvalidArgumentError, naming `text_name`, when `context`
// leaves no room for a prompt or `text` is too short.
std::vector<TokenId> fill_to_context(std::span<const TokenId> prompt, std::span<const TokenId> text,
                                     TokenId bos, std::int64_t context, std::int64_t max_new_tokens,
                                     std::size_t request, const std::string& text_name);

}  // namespace specdec::io
