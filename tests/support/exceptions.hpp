// The message of an expected exception, for tests that check several parts of
// one message.
#pragma once

#include <string>

#include "support/catch.hpp"

namespace specdec::testing {

// The message of the E that f throws; fails the test if f throws nothing (an
// exception of another type escapes and fails the test too).
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("expected an exception, none was thrown");
  return {};
}

}  // namespace specdec::testing
