// Whole-file helpers shared by the checkpoint readers and writers.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace specdec::io {

// Reads a whole file as bytes. Throws ModelLoadError naming the file when it is
// missing, not a regular file or unreadable.
std::string read_text_file(const std::filesystem::path& path);

// Writes the concatenation of `pieces` to `path` atomically: the bytes go to
// `path` + ".tmp", are flushed to disk, and the temporary is renamed over
// `path`, so a reader sees either the old file or the complete new one. Throws
// IoError naming the file on any failure (the temporary is removed).
void write_file_atomically(const std::filesystem::path& path,
                           const std::vector<std::span<const std::byte>>& pieces);

}  // namespace specdec::io
