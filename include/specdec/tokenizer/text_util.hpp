// Small text helpers shared by the tokenizers: UTF-8 decoding with
// SentencePiece's validity rules, and a string -> id hash map over strings
// owned elsewhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace specdec::tokenizer::detail {

// U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's visible space.
inline constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";
// U+FFFD REPLACEMENT CHARACTER.
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// Length of the UTF-8 sequence a lead byte announces, as SentencePiece's
// OneCharLen: 1 for ASCII and for stray continuation bytes, 2/3/4 otherwise.
inline std::size_t utf8_lead_len(unsigned char c) noexcept {
  return "\1\1\1\1\1\1\1\1\1\1\1\1\2\2\3\4"[c >> 4];
}

// Length of the valid UTF-8 character at the start of `s`, or 0 if it is not
// one (truncated, bad continuation, overlong, surrogate, > U+10FFFF).
inline std::size_t valid_utf8_len(std::string_view s) noexcept {
  if (s.empty()) return 0;
  const auto b0 = static_cast<unsigned char>(s[0]);
  if (b0 < 0x80) return 1;
  auto trail = [&](std::size_t i) { return (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80; };
  auto bits = [&](std::size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(s[i]) & 0x3F); };
  if ((b0 & 0xE0) == 0xC0) {
    if (s.size() < 2 || !trail(1)) return 0;
    const char32_t cp = (static_cast<char32_t>(b0 & 0x1F) << 6) | bits(1);
    return cp >= 0x80 ? 2 : 0;
  }
  if ((b0 & 0xF0) == 0xE0) {
    if (s.size() < 3 || !trail(1) || !trail(2)) return 0;
    const char32_t cp = (static_cast<char32_t>(b0 & 0x0F) << 12) | (bits(1) << 6) | bits(2);
    return (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) ? 3 : 0;
  }
  if ((b0 & 0xF8) == 0xF0) {
    if (s.size() < 4 || !trail(1) || !trail(2) || !trail(3)) return 0;
    const char32_t cp = (static_cast<char32_t>(b0 & 0x07) << 18) | (bits(1) << 12) | (bits(2) << 6) | bits(3);
    return (cp >= 0x10000 && cp <= 0x10FFFF) ? 4 : 0;
  }
  return 0;
}

// Appends `bytes` to `out`, each byte that does not start a valid UTF-8
// character replaced by U+FFFD (SentencePiece's rule for byte pieces).
inline void append_utf8_replacing_invalid(std::string_view bytes, std::string& out) {
  while (!bytes.empty()) {
    const std::size_t n = valid_utf8_len(bytes);
    if (n == 0) {
      out.append(kReplacementChar);
      bytes.remove_prefix(1);
    } else {
      out.append(bytes.substr(0, n));
      bytes.remove_prefix(n);
    }
  }
}

inline std::uint64_t hash_bytes(std::string_view s) noexcept {
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ (static_cast<std::uint64_t>(s.size()) << 32);
  const char* p = s.data();
  std::size_t n = s.size();
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  // Tail of 0-7 bytes without a variable-length copy: two overlapping
  // 4-byte loads, or first/middle/last byte (the length is already in h).
  std::uint64_t w = 0;
  if (n >= 4) {
    std::uint32_t a, b;
    std::memcpy(&a, p, 4);
    std::memcpy(&b, p + n - 4, 4);
    w = (static_cast<std::uint64_t>(a) << 32) | b;
  } else if (n > 0) {
    w = (static_cast<std::uint64_t>(static_cast<unsigned char>(p[0])) << 16) |
        (static_cast<std::uint64_t>(static_cast<unsigned char>(p[n >> 1])) << 8) |
        static_cast<unsigned char>(p[n - 1]);
  }
  h = (h ^ w) * 0x94D049BB133111EBull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return h;
}

// Open-addressing map from strings (which must outlive the map) to int32 ids.
// Slots are 8 bytes (32 hash bits + entry index), so an 8k-32k vocabulary's
// table stays cache-resident; most lookups during BPE are misses and end at
// an empty slot without touching the key.
class StringIdMap {
 public:
  // False (and no change) if `key` is already present.
  bool insert(std::string_view key, std::int32_t id) {
    if ((entries_.size() + 1) * 2 > slots_.size()) grow();
    const std::uint64_t h = hash_bytes(key);
    if (find_hashed(key, h) >= 0) return false;
    entries_.push_back(Entry{key.data(), key.size(), id});
    place(h, entries_.size());
    return true;
  }
  // The id of `key`, or -1.
  std::int32_t find(std::string_view key) const noexcept {
    if (slots_.empty()) return -1;
    return find_hashed(key, hash_bytes(key));
  }
  std::size_t size() const noexcept { return entries_.size(); }

 private:
  struct Entry {
    const char* data;
    std::size_t len;
    std::int32_t id;
  };

  std::int32_t find_hashed(std::string_view key, std::uint64_t h) const noexcept {
    const std::size_t mask = slots_.size() - 1;
    const std::uint64_t tag = h >> 32;
    for (std::size_t i = static_cast<std::size_t>(h) & mask;; i = (i + 1) & mask) {
      const std::uint64_t s = slots_[i];
      if (s == 0) return -1;
      if ((s >> 32) == tag) {
        const Entry& e = entries_[(s & 0xFFFFFFFFu) - 1];
        if (e.len == key.size() && (key.empty() || std::memcmp(e.data, key.data(), key.size()) == 0))
          return e.id;
      }
    }
  }

  void place(std::uint64_t h, std::size_t entry_plus_one) {
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = static_cast<std::size_t>(h) & mask;
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = ((h >> 32) << 32) | static_cast<std::uint64_t>(entry_plus_one);
  }

  void grow() {
    slots_.assign(slots_.empty() ? 64 : slots_.size() * 2, 0);
    for (std::size_t k = 0; k < entries_.size(); ++k)
      place(hash_bytes(std::string_view(entries_[k].data, entries_[k].len)), k + 1);
  }

  std::vector<std::uint64_t> slots_;
  std::vector<Entry> entries_;
};

}  // namespace specdec::tokenizer::detail
