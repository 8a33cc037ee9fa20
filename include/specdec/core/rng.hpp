// Philox-4x32-10, the counter-based generator of Salmon et al., "Parallel
// Random Numbers: As Easy as 1, 2, 3" (SC'11), as in Random123 and cuRAND.
//
// Counter-based means a uniform is a pure function of (seed, stream, index):
// a CPU run and a CUDA run with the same seed draw the same numbers, and any
// batch row can jump straight to its own draws (FlashInfer's seed + offset).
#pragma once

#include <array>
#include <cstdint>

#include "specdec/core/macros.hpp"

namespace specdec {

struct Philox4x32 {
  using Counter = std::array<std::uint32_t, 4>;
  using Key = std::array<std::uint32_t, 2>;

  static constexpr std::uint32_t kMul0 = 0xD2511F53u;
  static constexpr std::uint32_t kMul1 = 0xCD9E8D57u;
  static constexpr std::uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
  static constexpr std::uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1
  static constexpr int kRounds = 10;

  // One block: 4 uniformly distributed 32-bit words for counter `c` under key `k`.
  SPECDEC_HOST_DEVICE static Counter block(Counter c, Key k) {
    for (int r = 0; r < kRounds; ++r) {
      if (r > 0) {  // the key schedule bumps before rounds 2..10
        k[0] += kWeyl0;
        k[1] += kWeyl1;
      }
      const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c[0];
      const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c[2];
      const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
      const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
      c = Counter{hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    }
    return c;
  }
};

// A uniform double in [0, 1) with 53 random bits, from two 32-bit words.
// 53 bits (not float's 24) so that acceptance tests against probabilities as
// small as 1e-12 are still resolved exactly.
SPECDEC_HOST_DEVICE double uniform_from_words(std::uint32_t hi, std::uint32_t lo) {
  const std::uint64_t bits = (static_cast<std::uint64_t>(hi >> 5) << 26) | (lo >> 6);  // 27 + 26
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);                      // 2^-53
}

// The i-th uniform of stream `stream` under `seed`: block i/2 of counter
// {i/2 lo, i/2 hi, stream lo, stream hi}, words (0,1) or (2,3). Host rules and
// CUDA kernels both address their draws through this one function.
SPECDEC_HOST_DEVICE double philox_uniform(std::uint64_t seed, std::uint64_t stream,
                                          std::uint64_t index) {
  const std::uint64_t blk = index >> 1;
  const Philox4x32::Counter out = Philox4x32::block(
      {static_cast<std::uint32_t>(blk), static_cast<std::uint32_t>(blk >> 32),
       static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)},
      {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
  return (index & 1) ? uniform_from_words(out[2], out[3]) : uniform_from_words(out[0], out[1]);
}

// Random access to one stream from a starting offset: the form kernels and the
// host rules that share their row functions take (FlashInfer's seed + offset).
struct PhiloxUniforms {
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;
  std::uint64_t offset = 0;
  SPECDEC_HOST_DEVICE double operator[](std::uint64_t j) const {
    return philox_uniform(seed, stream, offset + j);
  }
};

// A sequential view of one stream: what rules draw from on the host. It keeps
// only (seed, stream, next index), so it is cheap to copy, save and resume.
class RandomStream {
 public:
  RandomStream() = default;
  RandomStream(std::uint64_t seed, std::uint64_t stream = 0, std::uint64_t offset = 0)
      : seed_(seed), stream_(stream), next_(offset) {}

  // Next uniform in [0, 1). Each block serves two draws.
  double uniform() {
    const std::uint64_t i = next_++;
    if ((i >> 1) != cached_block_ || !has_cache_) {
      const std::uint64_t blk = i >> 1;
      cache_ = Philox4x32::block(
          {static_cast<std::uint32_t>(blk), static_cast<std::uint32_t>(blk >> 32),
           static_cast<std::uint32_t>(stream_), static_cast<std::uint32_t>(stream_ >> 32)},
          {static_cast<std::uint32_t>(seed_), static_cast<std::uint32_t>(seed_ >> 32)});
      cached_block_ = blk;
      has_cache_ = true;
    }
    return (i & 1) ? uniform_from_words(cache_[2], cache_[3])
                   : uniform_from_words(cache_[0], cache_[1]);
  }

  // Hands the next `n` draws to a random-access consumer and skips past them.
  PhiloxUniforms take(std::uint64_t n) {
    const PhiloxUniforms u{seed_, stream_, next_};
    next_ += n;
    return u;
  }

  std::uint64_t seed() const { return seed_; }
  std::uint64_t stream() const { return stream_; }
  // Index of the next draw; pass it as `offset` to resume the same sequence.
  std::uint64_t offset() const { return next_; }

 private:
  std::uint64_t seed_ = 0;
  std::uint64_t stream_ = 0;
  std::uint64_t next_ = 0;
  std::uint64_t cached_block_ = 0;
  bool has_cache_ = false;
  Philox4x32::Counter cache_{};
};

}  // namespace specdec
