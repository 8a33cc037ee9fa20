// token_frequencies.json (io::read_token_frequencies / write_token_frequencies):
// a round trip, and every malformed file a ModelLoadError naming it.
#include "specdec/io/token_frequencies.hpp"

#include <cstdint>
#include <vector>

#include "io/io_test_util.hpp"
#include "specdec/core/error.hpp"
#include "support/catch.hpp"

using namespace specdec::io::testing;

TEST_CASE("Token frequencies round-trip, and a malformed file is refused naming what is wrong",
          "[unit][io]") {
  TempDir dir;
  const auto path = dir / "token_frequencies.json";
  const std::vector<std::int64_t> counts{5, 0, 9, 1};
  const std::vector<specdec::TokenId> hot{2, 0};
  specdec::io::write_token_frequencies(path, counts, hot);
  CHECK(specdec::io::read_token_frequencies(path) == counts);

  const auto refused = [&](std::string_view text, std::initializer_list<std::string_view> needles) {
    write_file(dir / "bad.json", text);
    check_throws<specdec::ModelLoadError>([&] { specdec::io::read_token_frequencies(dir / "bad.json"); },
                                          needles);
  };
  refused(R"({"hot": [1, 2]})", {"bad.json", "no \"counts\""});
  refused(R"([1, 2])", {"bad.json", "no \"counts\""});
  refused(R"({"counts": [1, -2]})", {"bad.json", "-2", "token 1", "negative"});
  refused(R"({"counts": [1, 2.5]})", {"bad.json", "count 1", "not an integer"});
  refused(R"({"counts": [1, 18446744073709551615]})", {"bad.json", "too large"});
  refused(R"({"counts": [1, )", {"bad.json", "not a token frequency file"});
  check_throws<specdec::ModelLoadError>([&] { specdec::io::read_token_frequencies(dir / "missing.json"); },
                                        {"missing.json", "specdec hot-tokens"});
}
