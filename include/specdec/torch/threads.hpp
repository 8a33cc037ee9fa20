// Moved: the forwards' threads are the CPU kernels' (specdec/cpu/threads.hpp,
// namespace specdec::cpu), which the libtorch backend runs on. The old names
// stay here for hosts written against them.
#pragma once

#include "specdec/cpu/threads.hpp"

namespace specdec::torch_backend {

using cpu::available_cores;
using cpu::contention_stats;
using cpu::ContentionStats;
using cpu::forward_threads;
using cpu::reset_contention_stats;
using cpu::set_default_forward_threads;
using cpu::set_forward_threads;

}  // namespace specdec::torch_backend
