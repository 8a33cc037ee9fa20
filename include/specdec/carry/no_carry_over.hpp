// The default carry-over: every round starts from nothing but the committed
// text.
#pragma once

#include <cstdint>

#include "specdec/concepts.hpp"

namespace specdec {

struct NoCarryOver {
  struct State {};
  CarryPlan plan(State&, TokenId, std::int32_t) { return {}; }
  template <class D>
  void after(State&, D&, const CarryRound&, Stats&) {}
};

}  // namespace specdec
