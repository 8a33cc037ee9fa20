// A token frequency file, token_frequencies.json: one count per vocabulary
// id, from which FR-Spec's hot vocabulary is drawn (the H most frequent
// tokens; arXiv 2502.14856, §3.2). `specdec hot-tokens --out` writes it:
//   {"counts": [c_0, c_1, ..., c_{V-1}], "hot": [the top ids, most frequent first]}
// Only "counts" is read back.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "specdec/core/types.hpp"

namespace specdec::io {

// The counts of `path`. Throws ModelLoadError naming the file when it is
// missing (with how to write one), not JSON, has no "counts" array of
// integers, or holds a negative count (naming its id).
std::vector<std::int64_t> read_token_frequencies(const std::filesystem::path& path);

// Writes {"counts", "hot"} atomically; IoError naming the file on failure.
void write_token_frequencies(const std::filesystem::path& path, std::span<const std::int64_t> counts,
                             std::span<const TokenId> hot);

}  // namespace specdec::io
