// A square bit matrix, row-major, 64 columns per word: the packed form of a
// tree attention mask (SGLang's QLEN_ONLY_BITPACKING, FlashInfer's
// packed_custom_mask). Bit (i, j) set means query i may attend to key j.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace specdec {

class BitMatrix {
 public:
  BitMatrix() = default;
  explicit BitMatrix(std::int32_t n)
      : n_(n), words_per_row_((n + 63) / 64), bits_(static_cast<std::size_t>(n) * words_per_row_) {}

  std::int32_t size() const { return n_; }
  std::int32_t words_per_row() const { return words_per_row_; }

  bool test(std::int32_t i, std::int32_t j) const {
    return (bits_[word(i, j)] >> (j & 63)) & 1u;
  }
  void set(std::int32_t i, std::int32_t j) { bits_[word(i, j)] |= std::uint64_t{1} << (j & 63); }
  // Row i as packed words (bit j of the row is bit j%64 of word j/64).
  std::span<const std::uint64_t> row(std::int32_t i) const {
    return {bits_.data() + static_cast<std::size_t>(i) * words_per_row_,
            static_cast<std::size_t>(words_per_row_)};
  }
  std::span<std::uint64_t> row(std::int32_t i) {
    return {bits_.data() + static_cast<std::size_t>(i) * words_per_row_,
            static_cast<std::size_t>(words_per_row_)};
  }
  std::span<const std::uint64_t> words() const { return bits_; }

  friend bool operator==(const BitMatrix&, const BitMatrix&) = default;

 private:
  std::size_t word(std::int32_t i, std::int32_t j) const {
    return static_cast<std::size_t>(i) * words_per_row_ + static_cast<std::size_t>(j >> 6);
  }

  std::int32_t n_ = 0;
  std::int32_t words_per_row_ = 0;
  std::vector<std::uint64_t> bits_;
};

}  // namespace specdec
