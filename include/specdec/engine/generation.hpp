// What a caller asks of a generation and what it gets back, shared by every
// decoder (speculative or not): the length limit, stop conditions, streaming.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/context_limit.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/round.hpp"
#include "specdec/core/sampling_params.hpp"
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
  // How this request samples: temperature (0 = greedy, the default: a
  // request that says nothing decodes deterministically), top-k, top-p, and
  // the seed of its random streams (draft sampling, acceptance). The target's
  // rows and the drafter's are warped with it.
  SamplingParams sampling{0.0f};
  // The host's id for this request, below 2^62. With the seed it keys the
  // request's random streams, so a request samples the same tokens alone or
  // in any batch, in any slot and under any sequence id. Requests that share
  // a seed need different ids to sample independently.
  std::uint64_t request_id = 0;
  static constexpr std::uint64_t kRequestIdLimit = std::uint64_t{1} << 62;

  // The Philox streams (core/rng.hpp) the request draws its drafts and its
  // acceptance tests from; request 0's are streams 1 and 2.
  std::uint64_t draft_stream() const { return request_id << 2 | 1; }
  std::uint64_t rule_stream() const { return request_id << 2 | 2; }

  void validate() const {
    sampling.validate();
    if (max_new_tokens < 0)
      throw InvalidArgumentError(fmt::format("GenerationOptions.max_new_tokens must be >= 0, got {}", max_new_tokens));
    for (const auto& s : stop_strings)
      if (s.empty()) throw InvalidArgumentError("GenerationOptions.stop_strings holds an empty string");
    if (!stop_strings.empty() && !detokenize)
      throw InvalidArgumentError("GenerationOptions: stop_strings need a detokenize function");
    if (request_id >= kRequestIdLimit)
      throw InvalidArgumentError(fmt::format("GenerationOptions.request_id must be below 2^62, got {}", request_id));
  }
};

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

  // The sequence (prompt + generated) may hold at most `context` tokens: a
  // prompt longer than that is refused with both numbers; generation stops
  // with kContextLimit when the context is full.
  void limit_context(std::int64_t context, std::int64_t prompt_tokens, std::string_view who) {
    if (prompt_tokens > context)
      throw InvalidArgumentError(fmt::format("{}: the prompt has {} tokens but the context holds {}", who,
                                             prompt_tokens, context));
    room_ = context - prompt_tokens;
    if (room_ == 0 && options_->max_new_tokens > 0) set_reason(StopReason::kContextLimit);
  }

  std::int64_t size() const { return std::int64_t(result_->tokens.size()); }
  bool full() const { return size() >= options_->max_new_tokens || size() >= room_; }
  std::int64_t remaining() const { return std::min(options_->max_new_tokens, room_) - size(); }

  // The most draft nodes a round may send to the target before the context is
  // full: a round's forward holds the root plus its nodes, and emits at most
  // depth + 1 tokens, so with `room` tokens left the tree gets room - 1.
  std::int32_t tree_room() const {
    const auto left = room_ == kUnboundedContext ? room_ : std::max<std::int64_t>(room_ - size() - 1, 0);
    return static_cast<std::int32_t>(std::min<std::int64_t>(left, std::numeric_limits<std::int32_t>::max()));
  }
  DraftBudget fit(DraftBudget budget) const {
    const auto cap = tree_room();
    budget.max_depth = std::min(budget.max_depth, cap);
    budget.max_nodes = std::min(budget.max_nodes, cap);
    budget.verify_nodes = std::min(budget.verify_nodes, cap);
    return budget;
  }

  // The host ends the generation early.
  void cancel() { set_reason(StopReason::kCancelled); }

  // Returns true when generation is over (after this token, or already full).
  bool push(TokenId token) {
    if (full()) return true;
    result_->tokens.push_back(token);
    if (*on_token_) (*on_token_)(token);
    const auto& stops = options_->stop_tokens;
    if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
      set_reason(StopReason::kStopToken);
      return true;
    }
    if (!options_->stop_strings.empty() && completes_stop_string()) {
      set_reason(StopReason::kStopString);
      return true;
    }
    if (size() >= options_->max_new_tokens) set_reason(StopReason::kMaxNewTokens);
    else if (size() >= room_) set_reason(StopReason::kContextLimit);
    return full();
  }

 private:
  void set_reason(StopReason r) { result_->stop_reason = result_->stats.stop_reason = r; }

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
  std::int64_t room_ = kUnboundedContext;  // tokens the context has left after the prompt
  std::size_t text_size_ = 0;  // length of the text decoded at the previous token
};

}  // namespace specdec
