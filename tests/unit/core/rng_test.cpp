#include <cmath>
#include <set>

#include "specdec/core/rng.hpp"
#include "support/catch.hpp"

using specdec::Philox4x32;

// Known-answer vectors of Random123's kat_vectors file (philox4x32 10 lines):
// counter[4], key[2] -> output[4].
TEST_CASE("Philox4x32-10 reproduces the Random123 known-answer vectors", "[unit][rng]") {
  struct Kat {
    Philox4x32::Counter ctr;
    Philox4x32::Key key;
    Philox4x32::Counter expected;
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const auto& k : kats) CHECK(Philox4x32::block(k.ctr, k.key) == k.expected);
}

TEST_CASE("RandomStream draws the same uniforms as random access by index", "[unit][rng]") {
  specdec::RandomStream s(1234, 7, 5);
  for (std::uint64_t i = 5; i < 40; ++i) CHECK(s.uniform() == specdec::philox_uniform(1234, 7, i));
  CHECK(s.offset() == 40);
  const auto window = s.take(3);
  CHECK(window[0] == specdec::philox_uniform(1234, 7, 40));
  CHECK(window[2] == specdec::philox_uniform(1234, 7, 42));
  CHECK(s.uniform() == specdec::philox_uniform(1234, 7, 43));
}

TEST_CASE("Philox uniforms lie in the half-open unit interval with the moments of U(0 1)", "[unit][rng]") {
  specdec::RandomStream s(42);
  const int n = 200000;
  double sum = 0, sum2 = 0;
  for (int i = 0; i < n; ++i) {
    const double u = s.uniform();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    sum += u;
    sum2 += u * u;
  }
  // Mean 1/2 (sd of the mean 0.29/sqrt(n) = 6.5e-4), second moment 1/3.
  CHECK(std::fabs(sum / n - 0.5) < 0.004);
  CHECK(std::fabs(sum2 / n - 1.0 / 3.0) < 0.004);
}

TEST_CASE("Different seeds and streams give different sequences", "[unit][rng]") {
  std::set<double> firsts;
  for (std::uint64_t seed = 0; seed < 4; ++seed)
    for (std::uint64_t stream = 0; stream < 4; ++stream)
      firsts.insert(specdec::philox_uniform(seed, stream, 0));
  CHECK(firsts.size() == 16);
}

TEST_CASE("uniform_from_words spans the half-open unit interval with 53 bits", "[unit][rng]") {
  CHECK(specdec::uniform_from_words(0, 0) == 0.0);
  const double top = specdec::uniform_from_words(0xffffffffu, 0xffffffffu);
  CHECK(top < 1.0);
  CHECK(top == 1.0 - std::ldexp(1.0, -53));
}
