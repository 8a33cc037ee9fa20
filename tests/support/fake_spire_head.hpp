// A host SpireHead (draft/spire_drafter.hpp) for the engine tests: its logits
// hash the sequence's last committed memory row, the tokens staged this round,
// the token and its position, so what it drafts depends on every hand-off
// (the verifier's rows, commits, staging) without a model behind it.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"

namespace specdec::testing {

class FakeSpireHead {
 public:
  // Memory rows of `width` floats: the hidden rows of the target's layer
  // `layer` (-1: after the final norm).
  FakeSpireHead(std::int64_t vocab, std::int64_t width, std::int32_t layer = -1)
      : vocab_(vocab), width_(width), layer_(layer) {}

  std::int64_t vocab_size() const { return vocab_; }
  std::int64_t max_context() const { return 1 << 20; }
  std::int32_t memory_layer() const { return layer_; }
  std::int32_t memory_layers() const { return 1; }
  std::int64_t steps() const { return steps_; }  // step() calls

  void open(std::int32_t seq) { seqs_[seq] = Sequence{}; }
  void close(std::int32_t seq) {
    if (seqs_.erase(seq) == 0) throw InvalidArgumentError(fmt::format("FakeSpireHead: sequence {} is not open", seq));
  }
  void remember(std::int32_t seq, std::span<const float> rows, std::int64_t n) {
    auto& s = at(seq);
    if (static_cast<std::int64_t>(rows.size()) != n * width_)
      throw ShapeError(fmt::format("FakeSpireHead: {} floats for {} rows of {}", rows.size(), n, width_));
    s.staged.clear();
    if (n > 0) s.last.assign(rows.end() - width_, rows.end());
    s.length += n;
  }
  void step(std::span<const std::int32_t> seqs, std::span<const TokenId> tokens, std::span<const std::int64_t> positions,
            std::span<float> out) {
    ++steps_;
    for (std::size_t r = 0; r < seqs.size(); ++r) {
      auto& s = at(seqs[r]);
      if (positions[r] != s.length + static_cast<std::int64_t>(s.staged.size()))
        throw InvalidArgumentError(fmt::format("FakeSpireHead: position {} after {} committed and {} staged",
                                               positions[r], s.length, s.staged.size()));
      std::uint64_t h = 1469598103934665603ull;
      const auto mix = [&](std::int64_t v) { h = (h ^ static_cast<std::uint64_t>(v + 1000)) * 1099511628211ull; };
      for (const float x : s.last) mix(std::lround(x));
      for (const auto t : s.staged) mix(t);
      mix(tokens[r]);
      mix(positions[r] % 3);
      for (std::int64_t v = 0; v < vocab_; ++v)
        out[r * static_cast<std::size_t>(vocab_) + static_cast<std::size_t>(v)] =
            static_cast<float>(((h >> 7) ^ static_cast<std::uint64_t>(v) * 0x9E3779B97F4A7C15ull) % 61) / 20.0f;
      s.staged.push_back(tokens[r]);
    }
  }

 private:
  struct Sequence {
    std::vector<float> last;      // the last committed memory row
    std::vector<TokenId> staged;  // this round's steps
    std::int64_t length = 0;
  };
  Sequence& at(std::int32_t seq) {
    const auto it = seqs_.find(seq);
    if (it == seqs_.end()) throw InvalidArgumentError(fmt::format("FakeSpireHead: sequence {} is not open", seq));
    return it->second;
  }

  std::int64_t vocab_, width_;
  std::int32_t layer_;
  std::int64_t steps_ = 0;
  std::unordered_map<std::int32_t, Sequence> seqs_;
};

}  // namespace specdec::testing
