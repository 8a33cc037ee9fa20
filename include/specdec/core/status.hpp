// Status codes: what device code and the CUDA launchers return instead of
// throwing (docs/design.md §4). Host components throw a specdec::Error; a
// launcher cannot (it may be called from code built without exceptions, and a
// kernel has no way to), so it reports one of these and leaves the message to
// the caller.
#pragma once

#include "specdec/core/macros.hpp"

namespace specdec {

enum class Status {
  kOk,               // done (for a launcher: the kernel was enqueued)
  kInvalidArgument,  // an argument outside its documented domain; nothing was launched
  kCudaError,        // the CUDA runtime reported an error
};

// A short, static description of `s`, for logs and test messages.
SPECDEC_HOST_DEVICE constexpr const char* status_string(Status s) {
  switch (s) {
    case Status::kOk:
      return "ok";
    case Status::kInvalidArgument:
      return "invalid argument";
    case Status::kCudaError:
      return "CUDA error";
  }
  return "unknown status";
}

}  // namespace specdec
