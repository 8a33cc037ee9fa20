// Device-side helpers of the CUDA tests: whether a device exists, and device
// memory holding a copy of a host vector.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "specdec/core/status.hpp"
#include "specdec/cuda/chain_speculative_sampling.hpp"
#include "support/catch.hpp"

namespace specdec::testing {

inline bool have_cuda_device() {
  int count = 0;
  return specdec::cuda::cuda_device_count(&count) == specdec::Status::kOk && count > 0;
}

// In a [cuda] test case: without a device, say so and leave the case
// (Catch2 v2 has no SKIP; CTest reads the message as a skip).
#define SPECDEC_SKIP_WITHOUT_DEVICE()                   \
  do {                                                  \
    if (!specdec::testing::have_cuda_device()) {        \
      WARN("skipped: no CUDA device");                  \
      return;                                           \
    }                                                   \
  } while (0)

// Device memory holding a copy of a host vector; freed on scope exit.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& host) : size_(host.size()) {
    // At least one element, so that an empty buffer is still a valid address.
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<std::size_t>(bytes(), 1)) == cudaSuccess);
    if (size_ > 0) REQUIRE(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }

  T* get() const { return ptr_; }
  std::vector<T> to_host() const {
    std::vector<T> host(size_);
    if (size_ > 0) REQUIRE(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
    return host;
  }

 private:
  std::size_t bytes() const { return size_ * sizeof(T); }
  std::size_t size_;
  T* ptr_ = nullptr;
};

}  // namespace specdec::testing
