#include "specdec/torch/autoregressive.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include <fmt/format.h>

#include "specdec/accept/row_math.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/logit_rows.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/warp.hpp"

namespace specdec::torch_backend {

GenerateResult generate_autoregressive(LlamaModel& model, std::int32_t seq, std::span<const TokenId> prompt,
                                       const GenerateOptions& options, const std::function<void(TokenId)>& on_token) {
  options.sampling.validate();
  if (prompt.empty()) throw InvalidArgumentError("generate: the prompt is empty (it needs at least one token)");
  if (options.max_new_tokens < 0)
    throw InvalidArgumentError(fmt::format("generate: max_new_tokens must be >= 0, got {}", options.max_new_tokens));
  const auto vocab = model.vocab_size();
  GenerateResult result;
  Warper warp;
  std::vector<float> probs(static_cast<std::size_t>(vocab));
  RandomStream rng(options.sampling.seed);
  model.open(seq);

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto first_token_at = start;
  std::vector<TokenId> input(prompt.begin(), prompt.end());
  std::vector<std::int64_t> positions(input.size());
  for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<std::int64_t>(i);
  std::vector<std::int32_t> keep;
  HostRows logits;
  while (static_cast<std::int64_t>(result.tokens.size()) < options.max_new_tokens) {
    const SequenceInput in{seq, input, positions};
    ForwardRequest request{std::span(&in, 1)};
    request.logits = logits.view(static_cast<std::int64_t>(input.size()), vocab);
    model.forward(request);
    keep.resize(input.size());
    for (std::size_t i = 0; i < keep.size(); ++i) keep[i] = static_cast<std::int32_t>(i);
    model.accept(seq, keep);
    const auto* last = request.logits.data_as<float>() + (request.logits.size(0) - 1) * vocab;
    warp(std::span<const float>(last, static_cast<std::size_t>(vocab)), options.sampling, probs);
    const TokenId next = row_math::sample_row(probs.data(), vocab, rng.uniform());
    if (result.tokens.empty()) first_token_at = Clock::now();
    result.tokens.push_back(next);
    if (on_token) on_token(next);
    if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), next) != options.stop_tokens.end()) {
      result.stopped = true;
      break;
    }
    positions.assign(1, model.cached_length(seq));
    input.assign(1, next);
  }
  const auto end = Clock::now();
  model.close(seq);
  result.time_to_first_token_ms = std::chrono::duration<double, std::milli>(first_token_at - start).count();
  result.decode_seconds = std::chrono::duration<double>(end - first_token_at).count();
  if (result.tokens.size() > 1 && result.decode_seconds > 0)
    result.tokens_per_second = static_cast<double>(result.tokens.size() - 1) / result.decode_seconds;
  return result;
}

}  // namespace specdec::torch_backend
