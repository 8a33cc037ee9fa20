// What a caller asks of a generation and what it gets back, shared by every
// decoder (speculative or not): the length limit, stop conditions, streaming.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"
#include "specdec/engine/stats.hpp"

namespace specdec {

struct GenerationOptions {
  std::int64_t max_new_tokens = 64;
  // Generation ends after emitting one of these (EOS).
  std::vector<TokenId> stop_tokens;
  // Generation ends after the token that completes one of these strings in the
  // generated text; `detokenize` (required with stop strings) turns the
  // generated tokens into that text.
  std::vector<std::string> stop_strings;
  std::function<std::string(std::span<const TokenId>)> detokenize;
  // Seeds the decoder's random streams (draft sampling, acceptance).
  std::uint64_t seed = 0;

  void validate() const {
    if (max_new_tokens < 0)
      throw InvalidArgumentError(fmt::format("GenerationOptions.max_new_tokens must be >= 0, got {}", max_new_tokens));
    for (const auto& s : stop_strings)
      if (s.empty()) throw InvalidArgumentError("GenerationOptions.stop_strings holds an empty string");
    if (!stop_strings.empty() && !detokenize)
      throw InvalidArgumentError("GenerationOptions: stop_strings need a detokenize function");
  }
};

enum class StopReason : std::uint8_t { kMaxNewTokens, kStopToken, kStopString };

struct GenerationResult {
  std::vector<TokenId> tokens;  // generated tokens, the prompt excluded
  StopReason stop_reason = StopReason::kMaxNewTokens;
  Stats stats;
};

// The decoders' stopwatch: seconds between two steady-clock readings.
using DecodeClock = std::chrono::steady_clock;
inline double seconds_between(DecodeClock::time_point a, DecodeClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Called for every generated token as it is committed (streaming).
using TokenCallback = std::function<void(TokenId)>;

// Appends tokens one at a time and says when generation must end; a decoder
// feeds it every token it commits, in order, and stops at the first `true`.
class TokenSink {
 public:
  TokenSink(const GenerationOptions& options, GenerationResult& result, const TokenCallback& on_token)
      : options_(&options), result_(&result), on_token_(&on_token) {}

  bool full() const { return std::int64_t(result_->tokens.size()) >= options_->max_new_tokens; }
  std::int64_t remaining() const { return options_->max_new_tokens - std::int64_t(result_->tokens.size()); }

  // Returns true when generation is over (after this token, or already full).
  bool push(TokenId token) {
    if (full()) return true;
    result_->tokens.push_back(token);
    if (*on_token_) (*on_token_)(token);
    const auto& stops = options_->stop_tokens;
    if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
      result_->stop_reason = StopReason::kStopToken;
      return true;
    }
    if (!options_->stop_strings.empty() && completes_stop_string()) {
      result_->stop_reason = StopReason::kStopString;
      return true;
    }
    if (full()) result_->stop_reason = StopReason::kMaxNewTokens;
    return full();
  }

 private:
  // A stop string ends in the text added by the newest token: search only the
  // tail that could hold it (text decoded before stays as it was).
  bool completes_stop_string() {
    const std::string text = options_->detokenize(result_->tokens);
    std::size_t longest = 0;
    for (const auto& s : options_->stop_strings) longest = std::max(longest, s.size());
    const std::size_t from = std::min(text_size_, text.size());
    const std::size_t start = from > longest ? from - longest + 1 : 0;
    text_size_ = text.size();
    for (const auto& s : options_->stop_strings)
      if (text.find(s, start) != std::string::npos) return true;
    return false;
  }

  const GenerationOptions* options_;
  GenerationResult* result_;
  const TokenCallback* on_token_;
  std::size_t text_size_ = 0;  // length of the text decoded at the previous token
};

}  // namespace specdec
