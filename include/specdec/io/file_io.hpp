// Whole-file helpers shared by the checkpoint readers and writers.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
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
// write_file_atomically of one text.
void write_text_atomically(const std::filesystem::path& path, std::string_view text);

// Appends `text` to `path` (created if missing) for logs that grow line by
// line (a training curve). With `sync`, flushed to disk before it returns (a
// file whose length another file records). Throws IoError naming the file
// when it cannot be opened or the write is short (a full disk).
void append_text(const std::filesystem::path& path, std::string_view text, bool sync = false);

}  // namespace specdec::io
