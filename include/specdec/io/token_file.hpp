// Flat token files: little-endian uint16 ids, as scripts/corpus/encode_corpus.py
// writes them and the trainers, `hot-tokens` and `sample-corpus` read them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace specdec::io {

// The ids of `path`. ModelLoadError naming the file when it is missing or
// unreadable, or holds an odd number of bytes.
std::vector<std::uint16_t> read_token_file(const std::filesystem::path& path);

}  // namespace specdec::io
