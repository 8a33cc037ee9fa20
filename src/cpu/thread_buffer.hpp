// A per-thread scratch buffer that grows to the largest request and is kept
// between calls: no allocation on the hot path once warm, and no sharing
// between threads that run forwards (or the threads of one forward)
// concurrently. Tag keeps the buffers of different call sites apart.
//
// Internal to src/cpu.
#pragma once

#include <cstdint>
#include <vector>

namespace specdec::cpu {

template <class Tag, class T = float>
T* thread_buffer(std::int64_t n) {
  thread_local std::vector<T> buffer;
  if (static_cast<std::int64_t>(buffer.size()) < n) buffer.resize(static_cast<std::size_t>(n));
  return buffer.data();
}

}  // namespace specdec::cpu
