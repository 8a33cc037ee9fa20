// Checks shared by the length policies: a DraftBudget a policy hands out must
// be one a tree builder can honour. Each failure throws InvalidArgumentError
// naming the field and its value.
#pragma once

#include <cmath>
#include <string_view>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/round.hpp"

namespace specdec::detail {

inline void check_budget(std::string_view policy, const DraftBudget& b) {
  if (b.max_depth < 1)
    throw InvalidArgumentError(fmt::format("{}: max_depth must be >= 1, got {}", policy, b.max_depth));
  if (b.max_nodes < 1)
    throw InvalidArgumentError(fmt::format("{}: max_nodes must be >= 1, got {}", policy, b.max_nodes));
  if (b.verify_nodes < 1 || b.verify_nodes > b.max_nodes)
    throw InvalidArgumentError(fmt::format("{}: verify_nodes must be in [1, max_nodes = {}], got {}", policy,
                                           b.max_nodes, b.verify_nodes));
  if (!(b.stop_below >= 0.0f && b.stop_below <= 1.0f))  // also rejects NaN
    throw InvalidArgumentError(fmt::format("{}: stop_below must be in [0, 1], got {}", policy, b.stop_below));
}

}  // namespace specdec::detail
