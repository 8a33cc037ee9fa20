// One new token of a cuda::LlamaModel forward, and one row move of its
// accept(), as its kernels read them (forward_plan.hpp fills these on the
// host). Plain data, no dependencies, so that device code can include it.
#pragma once

#include <cstdint>

namespace specdec::cuda {

// Its query sees keys [0, prefix) of its cache slot, and keys prefix + j
// for j in [0, window) where bit j of its mask row is set (mask_word < 0:
// all of them).
struct TokenPlan {
  std::int32_t slot = 0;
  std::int32_t capacity = 0;  // rows per layer and kv head of the slot's buffer
  std::int32_t position = 0;
  std::int32_t write_row = 0;  // the cache row of its key and value
  std::int32_t prefix = 0;
  std::int32_t window = 0;
  std::int32_t mask_word = -1;  // its row's first word in ForwardPlan::mask_words
};

// One accepted token's move in accept(): its key and value go from row
// `from` to row `to` of every layer and kv head (nothing when equal); when
// `sink_row` >= 0 its key is first copied into that row of the sequence's
// sink keys, kept as rotated at their own positions (a sink + window cache
// with positions within the cache rotates them again as tokens are evicted).
struct CacheMove {
  std::int32_t from = 0, to = 0, sink_row = -1;
};

}  // namespace specdec::cuda
