// Autoregressive decoding with the reference model: the baseline every
// speculative method is measured against (same model, same sampling, same
// RNG conventions). Greedy when SamplingParams.temperature == 0.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "specdec/core/sampling_params.hpp"
#include "specdec/core/types.hpp"
#include "specdec/torch/llama_model.hpp"

namespace specdec::torch_backend {

struct GenerateOptions {
  std::int64_t max_new_tokens = 64;
  SamplingParams sampling;
  std::vector<TokenId> stop_tokens;  // generation ends after emitting one of these
};

struct GenerateResult {
  std::vector<TokenId> tokens;     // generated tokens (the prompt excluded)
  double time_to_first_token_ms = 0.0;  // prefill + first sample
  double decode_seconds = 0.0;          // after the first token
  double tokens_per_second = 0.0;       // generated tokens after the first / decode_seconds
  bool stopped = false;                 // ended on a stop token
};

// Generates on sequence `seq` of `model` (started afresh). `on_token` is called
// for every generated token as it is committed (streaming); may be empty.
GenerateResult generate_autoregressive(LlamaModel& model, std::int32_t seq, std::span<const TokenId> prompt,
                                       const GenerateOptions& options,
                                       const std::function<void(TokenId)>& on_token = {});

}  // namespace specdec::torch_backend
