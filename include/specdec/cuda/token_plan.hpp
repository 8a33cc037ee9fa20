// One new token of a cuda::LlamaModel forward, as its kernels read it (see
// forward_plan.hpp, which fills these on the host). Plain data, no
// dependencies, so that device code can include it.
#pragma once

#include <cstdint>

namespace specdec::cuda {

// Its query sees keys [0, prefix) of its cache slot, and keys prefix + j
// for j in [0, window) where bit j of its mask row is set (mask_word < 0:
// all of them).
struct TokenPlan {
  std::int32_t slot = 0;
  std::int32_t position = 0;
  std::int32_t write_row = 0;  // the cache row of its key and value
  std::int32_t prefix = 0;
  std::int32_t window = 0;
  std::int32_t mask_word = -1;  // its row's first word in ForwardPlan::mask_words
};

}  // namespace specdec::cuda
