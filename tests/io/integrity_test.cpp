// What catches a corrupt weight file: the CRC-32C specdec writes into its
// safetensors files (every flipped data bit refused by name), and the weight
// reader's checks on any file (integer and F64 tensors refused, inf and NaN
// weights found with their place). docs/hostile_inputs.md.
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "io/io_test_util.hpp"
#include "specdec/core/error.hpp"
#include "specdec/io/crc32c.hpp"
#include "specdec/io/safetensors.hpp"
#include "specdec/io/safetensors_checkpoint.hpp"
#include "specdec/io/weights.hpp"
#include "support/catch.hpp"

using specdec::DType;
using specdec::TensorView;
using specdec::io::crc32c;
using specdec::io::crc32c_portable;
using specdec::io::SafetensorsFile;
using specdec::io::save_safetensors;
using namespace specdec::io::testing;

namespace {

std::span<const std::byte> as_bytes(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

std::uint32_t both(std::string_view s) {
  const auto hw = crc32c(as_bytes(s)), sw = crc32c_portable(as_bytes(s));
  CHECK(hw == sw);
  return hw;
}

}  // namespace

TEST_CASE("CRC-32C matches the published check values, in either implementation", "[unit][io]") {
  CHECK(both("") == 0u);
  CHECK(both("123456789") == 0xe3069283u);  // the CRC catalogue's check value
  // RFC 3720 §B.4: 32 bytes of zeros, of ones, ascending 0..31, descending.
  CHECK(both(std::string(32, '\0')) == 0x8a9136aau);
  CHECK(both(std::string(32, '\xff')) == 0x62a8ab43u);
  std::string up(32, '\0'), down(32, '\0');
  for (int i = 0; i < 32; ++i) {
    up[static_cast<std::size_t>(i)] = static_cast<char>(i);
    down[static_cast<std::size_t>(i)] = static_cast<char>(31 - i);
  }
  CHECK(both(up) == 0x46dd794eu);
  CHECK(both(down) == 0x113fdb5cu);
}

TEST_CASE("CRC-32C chains, and the instruction agrees with the table at every length and offset",
          "[unit][io]") {
  std::mt19937 gen(11);
  std::string data(300, '\0');
  for (auto& c : data) c = static_cast<char>(gen());
  for (std::size_t offset = 0; offset < 9; ++offset)
    for (std::size_t len = 0; len + offset <= 80; ++len) {
      const std::string_view s(data.data() + offset, len);
      CHECK(crc32c(as_bytes(s)) == crc32c_portable(as_bytes(s)));
    }
  const std::string_view all(data);
  for (const std::size_t cut : {0u, 1u, 7u, 8u, 150u, 299u, 300u})
    CHECK(crc32c(as_bytes(all.substr(cut)), crc32c(as_bytes(all.substr(0, cut)))) == crc32c(as_bytes(all)));
}

TEST_CASE("A flipped bit anywhere in a saved file's data fails its checksum, and unchecked files still open",
          "[unit][io]") {
  TempDir dir;
  std::vector<float> w(40);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.01f * static_cast<float>(i);
  std::vector<std::uint16_t> b(24, 0x3f80);
  const auto path = dir / "m.safetensors";
  save_safetensors(
      path,
      {{"w", TensorView(w.data(), DType::kF32, {4, 10})}, {"b", TensorView(b.data(), DType::kBF16, {24})}},
      {{"format", "pt"}});
  const std::string good = read_file(path);
  {
    const SafetensorsFile f(path);
    REQUIRE(f.metadata().contains(specdec::io::kChecksumKey));
    CHECK(f.metadata().at("format") == "pt");
  }
  const std::size_t data_start = good.size() - w.size() * 4 - b.size() * 2;
  for (std::size_t at = data_start; at < good.size(); ++at)
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = good;
      bad[at] = static_cast<char>(bad[at] ^ (1 << bit));
      write_file(dir / "bad.safetensors", bad);
      INFO("byte " << at << " bit " << bit);
      check_throws<specdec::ModelLoadError>([&] { SafetensorsFile f(dir / "bad.safetensors"); },
                                            {"bad.safetensors", "checksum", "corrupt"});
    }
  // The checksum's own text altered: still a mismatch; not hex: malformed.
  const auto key = good.find(specdec::io::kChecksumKey);
  REQUIRE(key != std::string::npos);
  const std::size_t value = key + specdec::io::kChecksumKey.size() + 3;  // past `":"`
  std::string altered = good;
  altered[value] = altered[value] == '0' ? '1' : '0';
  write_file(dir / "bad.safetensors", altered);
  check_throws<specdec::ModelLoadError>([&] { SafetensorsFile f(dir / "bad.safetensors"); }, {"checksum"});
  std::string malformed = good;
  malformed[value] = 'G';
  write_file(dir / "bad.safetensors", malformed);
  check_throws<specdec::ModelLoadError>([&] { SafetensorsFile f(dir / "bad.safetensors"); },
                                        {"specdec.crc32c", "8 lowercase hex digits"});
  // A writer's metadata may not claim the key.
  check_throws<specdec::InvalidArgumentError>(
      [&] {
        save_safetensors(path, {}, {{std::string(specdec::io::kChecksumKey), "00000000"}});
      },
      {"specdec.crc32c"});
  // Without a checksum (other writers' files) the flip is not seen here.
  save_safetensors(path, {{"w", TensorView(w.data(), DType::kF32, {4, 10})}}, {},
                   specdec::io::Checksum::kNone);
  std::string unchecked = read_file(path);
  unchecked.back() = static_cast<char>(unchecked.back() ^ 1);
  write_file(path, unchecked);
  CHECK_NOTHROW(SafetensorsFile(path));
}

TEST_CASE("first_non_finite finds the first inf or NaN of F32, BF16 and F16 data", "[unit][io]") {
  for (const std::int64_t n : {1, 63, 64, 65, 200}) {
    std::vector<float> f(static_cast<std::size_t>(n), 1.5f);
    std::vector<std::uint16_t> bf(static_cast<std::size_t>(n), 0x3fc0),
        h(static_cast<std::size_t>(n), 0x3e00);
    CHECK(specdec::io::first_non_finite(TensorView(f.data(), DType::kF32, {n})) == -1);
    CHECK(specdec::io::first_non_finite(TensorView(bf.data(), DType::kBF16, {n})) == -1);
    CHECK(specdec::io::first_non_finite(TensorView(h.data(), DType::kF16, {n})) == -1);
    for (const std::int64_t at : {std::int64_t{0}, n / 2, n - 1}) {
      CAPTURE(n, at);
      auto f2 = f;
      f2[static_cast<std::size_t>(at)] = std::numeric_limits<float>::infinity();
      CHECK(specdec::io::first_non_finite(TensorView(f2.data(), DType::kF32, {n})) == at);
      f2[static_cast<std::size_t>(at)] = -std::numeric_limits<float>::quiet_NaN();
      CHECK(specdec::io::first_non_finite(TensorView(f2.data(), DType::kF32, {n})) == at);
      auto bf2 = bf;
      bf2[static_cast<std::size_t>(at)] = 0xff80;  // -inf
      CHECK(specdec::io::first_non_finite(TensorView(bf2.data(), DType::kBF16, {n})) == at);
      auto h2 = h;
      h2[static_cast<std::size_t>(at)] = 0x7e01;  // NaN
      CHECK(specdec::io::first_non_finite(TensorView(h2.data(), DType::kF16, {n})) == at);
    }
  }
  // The largest finite values and subnormals are finite.
  std::vector<std::uint16_t> edge{0x7f7f, 0x0001, 0xff7f};
  CHECK(specdec::io::first_non_finite(TensorView(edge.data(), DType::kBF16, {3})) == -1);
  std::vector<std::uint16_t> edge16{0x7bff, 0x0001, 0xfbff};
  CHECK(specdec::io::first_non_finite(TensorView(edge16.data(), DType::kF16, {3})) == -1);
}

TEST_CASE("weight_view refuses integer and F64 weights, wrong shapes and non-finite values, by name",
          "[unit][io]") {
  TempDir dir;
  std::vector<float> w(6, 0.5f);
  w[4] = std::numeric_limits<float>::infinity();
  std::vector<float> fine(6, 0.25f);
  std::vector<std::int32_t> q(6, 3);
  std::vector<double> d(6, 0.5);
  std::vector<std::uint16_t> bf(6, 0x3f00);
  bf[1] = 0x7fc1;  // NaN
  save_safetensors(dir / "model.safetensors", {{"inf", TensorView(w.data(), DType::kF32, {2, 3})},
                                               {"fine", TensorView(fine.data(), DType::kF32, {2, 3})},
                                               {"quant", TensorView(q.data(), DType::kI32, {2, 3})},
                                               {"double", TensorView(d.data(), DType::kF64, {2, 3})},
                                               {"nan", TensorView(bf.data(), DType::kBF16, {6})}});
  const specdec::io::SafetensorsCheckpoint ckpt(dir.path());
  const std::int64_t shape[] = {2, 3}, flat[] = {6};
  const auto read = [&](const char* name, std::span<const std::int64_t> s) {
    return specdec::io::weight_view(ckpt, name, s, "mydir", "config.json");
  };
  const TensorView v = read("fine", shape);
  CHECK(v.dtype() == DType::kF32);
  CHECK(v.data_as<float>()[5] == 0.25f);
  check_throws<specdec::UnsupportedError>([&] { read("quant", shape); }, {"mydir", "quant", "I32"});
  check_throws<specdec::UnsupportedError>([&] { read("double", shape); }, {"mydir", "double", "F64"});
  check_throws<specdec::ModelLoadError>([&] { read("fine", flat); },
                                        {"mydir", "fine", "[2, 3]", "config.json implies [6]"});
  check_throws<specdec::ModelLoadError>([&] { read("inf", shape); },
                                        {"mydir", "inf", "row 1, column 1 (element 4)", "corrupt"});
  check_throws<specdec::ModelLoadError>([&] { read("nan", flat); }, {"nan", "element 1"});
  check_throws<specdec::ModelLoadError>([&] { read("absent", flat); }, {"mydir", "absent", "missing"});
}
