// Portability macros shared by host and device code.
//
// SPECDEC_HOST_DEVICE marks the per-row math that both the host backend and the
// CUDA kernels in cuda/ call, so the host tests cover what the kernels run
// (the CUTLASS `CUTE_HOST_DEVICE` idea). Plain C++ compilers see `inline`.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define SPECDEC_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define SPECDEC_HOST_DEVICE inline
#endif

// Internal invariants (not user errors: those throw a specdec::Error). On by
// default; a build may define SPECDEC_NO_ASSERT to compile them out.
#if defined(SPECDEC_NO_ASSERT) || defined(__CUDA_ARCH__)
#define SPECDEC_ASSERT(cond) ((void)0)
#else
#include <cstdio>
#include <cstdlib>
#define SPECDEC_ASSERT(cond)                                                              \
  ((cond) ? (void)0                                                                       \
          : (std::fprintf(stderr, "%s:%d: specdec internal invariant failed: %s\n", __FILE__, \
                          __LINE__, #cond),                                               \
             std::abort()))
#endif
