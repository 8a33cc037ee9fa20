// The default selection: the target verifies every drafted node.
#pragma once

#include <span>

#include "specdec/core/round.hpp"

namespace specdec {

struct SelectAll {
  void select(std::span<Selection>) {}
};

}  // namespace specdec
