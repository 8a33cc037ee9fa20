// How many tokens (prompt + generated) a component's sequence can hold: its
// max_context() when it has one (models, and the drafters and verifiers that
// hold a model), else unbounded (an n-gram drafter). Decoders stop a
// generation at the smallest limit of their components (StopReason::kContextLimit).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <limits>

namespace specdec {

inline constexpr std::int64_t kUnboundedContext = std::numeric_limits<std::int64_t>::max();

template <class C>
std::int64_t context_limit(const C& component) {
  if constexpr (requires { { component.max_context() } -> std::convertible_to<std::int64_t>; })
    return static_cast<std::int64_t>(component.max_context());
  else
    return kUnboundedContext;
}

// The context a composition can use: the smallest of its components'.
template <class... C>
std::int64_t context_limit(const C&... components)
  requires(sizeof...(C) > 1)
{
  return std::min({context_limit(components)...});
}

}  // namespace specdec
