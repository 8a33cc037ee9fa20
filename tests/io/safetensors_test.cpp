// SafetensorsFile / save_safetensors: files made by hand per the format spec,
// byte-exact agreement with the reference writer's layout, round trips.
#include "specdec/io/safetensors.hpp"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "io/io_test_util.hpp"
#include "specdec/core/error.hpp"
#include "specdec/io/float_convert.hpp"
#include "support/catch.hpp"

using specdec::DType;
using specdec::TensorView;
using specdec::io::Metadata;
using specdec::io::NamedTensor;
using specdec::io::SafetensorsFile;
using specdec::io::save_safetensors;
using namespace specdec::io::testing;

namespace {

std::string span_string(std::span<const std::byte> s) {
  return {reinterpret_cast<const char*>(s.data()), s.size()};
}

}  // namespace

TEST_CASE("A safetensors file built by hand from the spec opens with the right names, dtypes and bytes",
          "[unit][io]") {
  TempDir dir;
  // Header exactly as the spec writes it; 84 characters, padded to 88.
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"I64","shape":[],"data_offsets":[8,16]}})";
  const std::string data = bytes_of<float>({1.0f, -2.5f}) + bytes_of<std::int64_t>({-7});
  const auto path = dir / "golden.safetensors";
  write_file(path, safetensors_bytes(header, data));

  const SafetensorsFile f(path);
  CHECK(f.path() == path);
  CHECK(f.names() == std::vector<std::string>{"a", "b"});
  CHECK(f.num_tensors() == 2);
  CHECK(f.contains("a"));
  CHECK_FALSE(f.contains("c"));
  CHECK(f.header_size() % 8 == 0);
  CHECK(f.header_size() >= header.size());
  CHECK(f.data_size() == 16);
  CHECK(f.metadata() == Metadata{{"format", "pt"}});

  const auto& a = f.info("a");
  CHECK(a.dtype_name == "F32");
  CHECK(a.dtype == DType::kF32);
  CHECK(a.shape == std::vector<std::int64_t>{2});
  CHECK(a.begin == 0);
  CHECK(a.end == 8);
  CHECK(a.numel() == 2);
  const TensorView va = f.view("a");
  CHECK(va.dtype() == DType::kF32);
  CHECK(va.ndim() == 1);
  CHECK(va.size(0) == 2);
  CHECK(f.is_aligned("a"));
  CHECK(va.data_as<float>()[0] == 1.0f);
  CHECK(va.data_as<float>()[1] == -2.5f);

  const TensorView vb = f.view("b");  // a scalar: shape []
  CHECK(vb.ndim() == 0);
  CHECK(vb.numel() == 1);
  CHECK(vb.data_as<std::int64_t>()[0] == -7);
  CHECK(span_string(f.bytes("b")) == bytes_of<std::int64_t>({-7}));
}

TEST_CASE("An unpadded header and tensors in any header order are accepted", "[unit][io]") {
  TempDir dir;
  // Older writers did not pad; the JSON order need not be the data order.
  const std::string header = R"({"z":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
                             R"("y":{"dtype":"U8","shape":[1,2],"data_offsets":[3,5]}})";
  const auto path = dir / "unpadded.safetensors";
  write_file(path, safetensors_bytes(header, "abcde", /*pad=*/false));
  const SafetensorsFile f(path);
  CHECK(f.header_size() == header.size());
  CHECK(f.names() == std::vector<std::string>{"y", "z"});
  CHECK(span_string(f.bytes("z")) == "abc");
  CHECK(span_string(f.bytes("y")) == "de");
  CHECK(f.metadata().empty());
}

// The byte sequences below are what safetensors' own writer produces for these
// inputs (its serialization tests pin the same layouts): compact JSON, offsets
// contiguous, header padded with spaces to a multiple of 8.
TEST_CASE("save_safetensors writes the same bytes as the reference writer", "[unit][io]") {
  // Without specdec's checksum (Checksum::kNone) the bytes are the reference's.
  TempDir dir;
  constexpr auto kNone = specdec::io::Checksum::kNone;
  const std::vector<float> values{0, 1, 2, 3, 4, 5};
  const std::string data = bytes_of<float>({0, 1, 2, 3, 4, 5});

  SECTION("a 64-byte header needs no padding") {
    const auto path = dir / "attn.safetensors";
    save_safetensors(
        path, {{"attn.0", TensorView(const_cast<float*>(values.data()), DType::kF32, {1, 2, 3})}}, {}, kNone);
    const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
    REQUIRE(header.size() == 64);
    CHECK(read_file(path) == le_u64(64) + header + data);
  }
  SECTION("a 65-byte header is padded with 7 spaces so the f32 data is aligned") {
    const auto path = dir / "attn0.safetensors";
    save_safetensors(path,
                     {{"attn0", TensorView(const_cast<float*>(values.data()), DType::kF32, {1, 1, 2, 3})}},
                     {}, kNone);
    const std::string header = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
    REQUIRE(header.size() == 65);
    CHECK(read_file(path) == le_u64(72) + header + "       " + data);
    CHECK(SafetensorsFile(path).is_aligned("attn0"));
  }
  SECTION("no tensors, with and without metadata") {
    save_safetensors(dir / "empty.safetensors", {}, {}, kNone);
    CHECK(read_file(dir / "empty.safetensors") == le_u64(8) + "{}      ");
    save_safetensors(dir / "meta.safetensors", {}, {{"framework", "pt"}}, kNone);
    CHECK(read_file(dir / "meta.safetensors") ==
          le_u64(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
    CHECK(SafetensorsFile(dir / "meta.safetensors").metadata() == Metadata{{"framework", "pt"}});
  }
}

TEST_CASE("save_safetensors orders tensors by descending dtype then name, so each is aligned", "[unit][io]") {
  TempDir dir;
  std::vector<std::uint8_t> u8{1, 2, 3};
  std::vector<std::uint16_t> f16{0x3C00};
  std::vector<double> f64{0.5};
  std::vector<float> f32a{1.0f}, f32b{2.0f};
  const auto path = dir / "order.safetensors";
  save_safetensors(path, {{"u", TensorView(u8.data(), DType::kU8, {3})},
                          {"h", TensorView(f16.data(), DType::kF16, {1})},
                          {"fb", TensorView(f32b.data(), DType::kF32, {1})},
                          {"d", TensorView(f64.data(), DType::kF64, {1})},
                          {"fa", TensorView(f32a.data(), DType::kF32, {1})}});
  const SafetensorsFile f(path);
  // F64 (rank above F32) first, then F32 by name, then F16, then U8.
  CHECK(f.info("d").begin == 0);
  CHECK(f.info("fa").begin == 8);
  CHECK(f.info("fb").begin == 12);
  CHECK(f.info("h").begin == 16);
  CHECK(f.info("u").begin == 18);
  CHECK(f.data_size() == 21);
  for (const auto& name : f.names()) CHECK(f.is_aligned(name));
  // The header lists tensors in data order, as the reference writer does.
  const std::string text = read_file(path);
  CHECK(text.find("\"d\"") < text.find("\"fa\""));
  CHECK(text.find("\"fb\"") < text.find("\"h\""));
  CHECK(text.find("\"h\"") < text.find("\"u\""));
}

TEST_CASE("Every dtype round-trips through save and open with exact bytes and shapes", "[unit][io]") {
  TempDir dir;
  std::vector<float> f32{1.5f, -0.0f, 3.25f, 1e-30f, -7.0f, 0.1f};
  std::vector<std::uint16_t> f16{0x3C00, 0xC000, 0x7BFF, 0x0001};
  std::vector<std::uint16_t> bf16{0x3F80, 0xC000, 0x7F80};
  std::vector<double> f64{3.141592653589793, -1e300};
  std::vector<std::int32_t> i32{-1, 2147483647, 0};
  std::vector<std::int64_t> i64{-9000000000000000000LL, 42};
  std::vector<std::uint8_t> u8{0, 255, 7, 8};
  const std::vector<NamedTensor> tensors{
      {"model.f32", TensorView(f32.data(), DType::kF32, {2, 3})},
      {"model.f16", TensorView(f16.data(), DType::kF16, {2, 1, 2})},
      {"model.bf16", TensorView(bf16.data(), DType::kBF16, {3})},
      {"model.f64", TensorView(f64.data(), DType::kF64, {2})},
      {"model.i32", TensorView(i32.data(), DType::kI32, {1, 3})},
      {"model.i64", TensorView(i64.data(), DType::kI64, {2})},
      {"model.u8", TensorView(u8.data(), DType::kU8, {2, 2})},
      {"model.empty", TensorView(f32.data(), DType::kF32, {0, 4})},
      {"model.scalar", TensorView(f64.data(), DType::kF64, {})},
      {"model.6d", TensorView(u8.data(), DType::kU8, {1, 1, 2, 1, 2, 1})},
  };
  const Metadata meta{{"format", "pt"}, {"note", "unicode \xc3\xa9 and \"quotes\""}};
  const auto path = dir / "all.safetensors";
  save_safetensors(path, tensors, meta);

  const SafetensorsFile f(path);
  Metadata with_checksum = meta;
  with_checksum.emplace(specdec::io::kChecksumKey, f.metadata().at(std::string(specdec::io::kChecksumKey)));
  CHECK(f.metadata() == with_checksum);
  REQUIRE(f.num_tensors() == tensors.size());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    const TensorView v = f.view(name);
    CHECK(v.dtype() == t.dtype());
    REQUIRE(v.ndim() == t.ndim());
    for (int d = 0; d < t.ndim(); ++d) CHECK(v.size(d) == t.size(d));
    const auto n = static_cast<std::size_t>(t.numel()) * specdec::dtype_size(t.dtype());
    CHECK(f.info(name).nbytes() == n);
    CHECK(f.bytes(name).size() == n);
    if (n > 0) CHECK(std::memcmp(v.data(), t.data(), n) == 0);
    CHECK(f.is_aligned(name));
  }
  CHECK_FALSE(std::filesystem::exists(dir / "all.safetensors.tmp"));
}

TEST_CASE("Saving over an existing file replaces it whole", "[unit][io]") {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  std::vector<float> big(100, 1.0f), small{2.0f};
  save_safetensors(path, {{"w", TensorView(big.data(), DType::kF32, {100})}});
  save_safetensors(path, {{"w", TensorView(small.data(), DType::kF32, {1})}});
  const SafetensorsFile f(path);
  CHECK(f.view("w").numel() == 1);
  CHECK(f.view("w").data_as<float>()[0] == 2.0f);
}

TEST_CASE("Views stay valid when the file object is moved", "[unit][io]") {
  TempDir dir;
  std::vector<float> w{4.0f, 5.0f};
  save_safetensors(dir / "m.safetensors", {{"w", TensorView(w.data(), DType::kF32, {2})}});
  SafetensorsFile f(dir / "m.safetensors");
  const TensorView v = f.view("w");
  SafetensorsFile g(std::move(f));
  std::vector<SafetensorsFile> files;
  files.push_back(std::move(g));
  CHECK(v.data_as<float>()[1] == 5.0f);
  CHECK(files[0].view("w").data() == v.data());
  SafetensorsFile h(dir / "m.safetensors");
  h = std::move(files[0]);
  CHECK(h.view("w").data_as<float>()[0] == 4.0f);
}

TEST_CASE("A tensor with a dtype specdec cannot view opens, lists, reads as bytes, and throws on view()",
          "[unit][io]") {
  TempDir dir;
  const std::string header = R"({"fp8":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]},)"
                             R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  const auto path = dir / "fp8.safetensors";
  write_file(path, safetensors_bytes(header, "\x01\x02\x03\x04" + bytes_of<float>({9.0f})));
  const SafetensorsFile f(path);
  CHECK(f.names() == std::vector<std::string>{"fp8", "w"});
  CHECK(f.info("fp8").dtype_name == "F8_E4M3");
  CHECK_FALSE(f.info("fp8").dtype.has_value());
  CHECK(span_string(f.bytes("fp8")) == "\x01\x02\x03\x04");
  check_throws<specdec::UnsupportedError>([&] { (void)f.view("fp8"); },
                                          {"fp8.safetensors", "'fp8'", "F8_E4M3"});
  // The F32 tensor after it is 4-byte aligned only if the header is: it is.
  CHECK(f.view("w").data_as<float>()[0] == 9.0f);
}

TEST_CASE("A misaligned tensor from an unaligning writer still views and converts", "[unit][io]") {
  TempDir dir;
  // U8 [1] first puts the F32 at data offset 1: misaligned for f32.
  const std::string header = R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                             R"("w":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})";
  const auto path = dir / "old.safetensors";
  write_file(path, safetensors_bytes(header, std::string(1, '\x07').append(bytes_of<float>({1.25f, -3.0f}))));
  const SafetensorsFile f(path);
  CHECK_FALSE(f.is_aligned("w"));
  std::vector<float> out(2);
  specdec::io::to_f32(f.view("w"), out.data());  // reads through memcpy
  CHECK(out == std::vector<float>{1.25f, -3.0f});
}

TEST_CASE("save_safetensors rejects what it cannot write, naming the file and tensor", "[unit][io]") {
  TempDir dir;
  std::vector<float> w(6, 1.0f);
  const auto path = dir / "bad.safetensors";
  const TensorView t(w.data(), DType::kF32, {6});
  check_throws<specdec::InvalidArgumentError>(
      [&] {
        save_safetensors(path, {{"x", t}, {"x", t}});
      },
      {"bad.safetensors", "'x'", "twice"});
  check_throws<specdec::InvalidArgumentError>(
      [&] {
        save_safetensors(path, {{"__metadata__", t}});
      },
      {"bad.safetensors", "__metadata__", "reserved"});
  const std::int64_t shape[] = {2, 3};
  const std::int64_t strides[] = {1, 2};
  const TensorView strided(w.data(), DType::kF32, shape, 2, strides);
  check_throws<specdec::UnsupportedError>(
      [&] {
        save_safetensors(path, {{"s", strided}});
      },
      {"bad.safetensors", "'s'", "not contiguous"});
  const TensorView on_gpu(w.data(), DType::kF32, {6}, specdec::Device{specdec::DeviceKind::kCUDA, 0});
  check_throws<specdec::UnsupportedError>(
      [&] {
        save_safetensors(path, {{"g", on_gpu}});
      },
      {"bad.safetensors", "'g'", "host memory"});
  check_throws<specdec::InvalidArgumentError>(
      [&] {
        save_safetensors(path, {{"bad\xff utf8", t}});
      },
      {"bad.safetensors", "header"});
  check_throws<specdec::IoError>(
      [&] {
        save_safetensors(dir / "no/such/dir/m.safetensors", {{"x", t}});
      },
      {"m.safetensors", "No such file"});
  CHECK_FALSE(std::filesystem::exists(path));
}
