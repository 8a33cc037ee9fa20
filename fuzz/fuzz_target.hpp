// What every fuzz target here checks: the parser under test returns, or
// throws a specdec::Error (a typed error naming the problem). A crash, a
// sanitizer report, a leak or any other exception is a finding; libFuzzer
// reports an exception that escapes LLVMFuzzerTestOneInput as a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "specdec/core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace specdec::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `parse`; a specdec::Error is an expected outcome of bad input.
template <class F>
void expect_typed_errors(F parse) {
  try {
    parse();
  } catch (const specdec::Error&) {
  }
}

}  // namespace specdec::fuzz
