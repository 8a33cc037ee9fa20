// Scalar vocabulary types shared by every component.
#pragma once

#include <cstdint>

namespace specdec {

// A token id in the model's vocabulary (the Hugging Face convention: int32).
using TokenId = std::int32_t;

// "No token" marker, used for padding in batched outputs.
inline constexpr TokenId kNoToken = -1;

}  // namespace specdec
