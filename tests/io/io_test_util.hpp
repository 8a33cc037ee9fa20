// Helpers for the checkpoint I/O tests: a scratch directory per test, raw
// file writing, hand-built safetensors files, and an exception check that
// asserts the type and every expected piece of the message.
#pragma once

#include <stdlib.h>  // mkdtemp

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "support/catch.hpp"

namespace specdec::io::testing {

// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "specdec_io_XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& p, std::string_view bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE(f.good());
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The 8-byte little-endian length prefix, written out byte by byte.
inline std::string le_u64(std::uint64_t n) {
  std::string out(8, '\0');
  for (std::size_t i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xffu);
  return out;
}

// A safetensors file by the spec: prefix, header (space-padded to a multiple
// of 8 when `pad`), data.
inline std::string safetensors_bytes(std::string header, std::string_view data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  return le_u64(header.size()) + header + std::string(data);
}

// Little-endian bytes of some values (the tests run on little-endian hosts,
// as the format itself assumes).
template <class T>
std::string bytes_of(std::initializer_list<T> values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

// Runs `f`, which must throw exactly `E` (or a subclass) with a message that
// contains every string in `needles`.
template <class E, class F>
void check_throws(F&& f, std::initializer_list<std::string_view> needles) {
  bool threw = false;
  try {
    f();
  } catch (const E& e) {
    threw = true;
    const std::string msg = e.what();
    INFO("message: " << msg);
    for (const std::string_view n : needles) {
      INFO("expected to contain: " << n);
      CHECK(msg.find(n) != std::string::npos);
    }
  }
  CHECK(threw);
}

}  // namespace specdec::io::testing
