// A method spec ("chain:k=4:rule=block", as `--method` takes it) through the
// standard registry's parser; a spec that parses must print back to a spec
// that parses to the same.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_target.hpp"
#include "specdec/methods/standard_methods.hpp"
#include "specdec/testing/hashed_context_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto registry = specdec::standard_methods<specdec::testing::HashedContextModel>();
  specdec::fuzz::expect_typed_errors([&] {
    const auto config = registry.parse(specdec::fuzz::as_text(data, size));
    const std::string spec = config.spec();
    if (registry.parse(spec).spec() != spec) std::abort();
  });
  return 0;
}
