// Every way a .safetensors file can be malformed, each fed by a crafted file:
// the error is a ModelLoadError naming the file and the specific problem.
#include <cstdint>
#include <string>

#include "io/io_test_util.hpp"
#include "specdec/core/error.hpp"
#include "specdec/io/safetensors.hpp"
#include "support/catch.hpp"

using specdec::ModelLoadError;
using specdec::io::SafetensorsFile;
using namespace specdec::io::testing;

namespace {

// Writes `bytes` to <dir>/<name> and expects opening it to fail with `needles`
// (the file name is always expected too).
void expect_bad_file(const TempDir& dir, const std::string& name, const std::string& bytes,
                     std::initializer_list<std::string_view> needles) {
  const auto path = dir / name;
  write_file(path, bytes);
  INFO("file: " << name);
  check_throws<ModelLoadError>([&] { SafetensorsFile f(path); }, {name});
  check_throws<ModelLoadError>([&] { SafetensorsFile f(path); }, needles);
}

// One F32 [2] tensor `a` whose header entry is `entry`, with 8 data bytes.
std::string file_with_entry(const std::string& entry, std::size_t data_bytes = 8) {
  return safetensors_bytes(R"({"a":)" + entry + "}", std::string(data_bytes, '\0'));
}

}  // namespace

TEST_CASE("Opening a missing file or a directory throws ModelLoadError naming it", "[unit][io]") {
  TempDir dir;
  check_throws<ModelLoadError>([&] { SafetensorsFile f(dir / "absent.safetensors"); },
                               {"absent.safetensors", "cannot open", "No such file"});
  std::filesystem::create_directory(dir / "folder.safetensors");
  check_throws<ModelLoadError>([&] { SafetensorsFile f(dir / "folder.safetensors"); },
                               {"folder.safetensors", "not a readable regular file"});
}

TEST_CASE("A file shorter than the 8-byte length prefix is rejected", "[unit][io]") {
  TempDir dir;
  expect_bad_file(dir, "empty.safetensors", "", {"0 bytes", "shorter than the 8-byte header length prefix"});
  expect_bad_file(dir, "seven.safetensors", std::string("\x02\0\0\0\0\0\0", 7), {"7 bytes", "shorter than"});
}

TEST_CASE("A header length beyond the file or beyond 100 MB is rejected", "[unit][io]") {
  TempDir dir;
  expect_bad_file(dir, "long.safetensors", le_u64(64) + "{}",
                  {"header length 64 exceeds the 2 bytes after the 8-byte length prefix"});
  expect_bad_file(dir, "huge.safetensors", le_u64(0x0102030405060708ull) + "{}      ",
                  {"header length 72623859790382856 exceeds the 100000000-byte limit"});
  expect_bad_file(dir, "limit.safetensors", le_u64(100'000'001) + "{}      ", {"100000000-byte limit"});
}

TEST_CASE("A header that is not a JSON object is rejected", "[unit][io]") {
  TempDir dir;
  expect_bad_file(dir, "json.safetensors", safetensors_bytes(R"({"a":{"dtype":"F32",)", ""),
                  {"header is not valid JSON", "parse error"});
  expect_bad_file(dir, "nul.safetensors", le_u64(8) + std::string("{}\0\0\0\0\0\0", 8),
                  {"header is not valid JSON", "NUL byte at header offset 2"});
  expect_bad_file(dir, "array.safetensors", safetensors_bytes("[1,2]", ""),
                  {"header must be a JSON object", "array"});
  expect_bad_file(dir, "utf8.safetensors", safetensors_bytes("{\"\xff\":1}", ""),
                  {"header is not valid JSON"});
}

TEST_CASE("A tensor named twice in the header is rejected", "[unit][io]") {
  TempDir dir;
  const std::string e = R"({"dtype":"U8","shape":[1],"data_offsets":[0,1]})";
  expect_bad_file(dir, "dup.safetensors", safetensors_bytes(R"({"a":)" + e + R"(,"a":)" + e + "}", "x"),
                  {"header names 'a' twice"});
}

TEST_CASE("Bad __metadata__ is rejected", "[unit][io]") {
  TempDir dir;
  expect_bad_file(dir, "meta1.safetensors", safetensors_bytes(R"({"__metadata__":[]})", ""),
                  {"__metadata__ must be an object"});
  expect_bad_file(dir, "meta2.safetensors", safetensors_bytes(R"({"__metadata__":{"total":12}})", ""),
                  {"__metadata__ 'total' must be a string", "number"});
}

TEST_CASE("A tensor entry with a missing field is rejected naming the tensor and field", "[unit][io]") {
  TempDir dir;
  expect_bad_file(dir, "nodtype.safetensors", file_with_entry(R"({"shape":[2],"data_offsets":[0,8]})"),
                  {"tensor 'a'", "missing field 'dtype'"});
  expect_bad_file(dir, "noshape.safetensors", file_with_entry(R"({"dtype":"F32","data_offsets":[0,8]})"),
                  {"tensor 'a'", "missing field 'shape'"});
  expect_bad_file(dir, "nooffsets.safetensors", file_with_entry(R"({"dtype":"F32","shape":[2]})"),
                  {"tensor 'a'", "missing field 'data_offsets'"});
  expect_bad_file(dir, "notobj.safetensors", file_with_entry("[0,8]"),
                  {"tensor 'a'", "entry must be an object", "array"});
}

TEST_CASE("A tensor entry with a field of the wrong type is rejected", "[unit][io]") {
  TempDir dir;
  expect_bad_file(dir, "dtypenum.safetensors",
                  file_with_entry(R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})"),
                  {"tensor 'a'", "field 'dtype' must be a string", "number"});
  expect_bad_file(dir, "shapestr.safetensors",
                  file_with_entry(R"({"dtype":"F32","shape":"2","data_offsets":[0,8]})"),
                  {"tensor 'a'", "field 'shape' must be an array of non-negative integers"});
  expect_bad_file(dir, "shapeneg.safetensors",
                  file_with_entry(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"),
                  {"tensor 'a'", "field 'shape' must be an array of non-negative integers", "[-2]"});
  expect_bad_file(dir, "shapefloat.safetensors",
                  file_with_entry(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"),
                  {"tensor 'a'", "field 'shape'"});
  expect_bad_file(dir, "offs3.safetensors",
                  file_with_entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4,8]})"),
                  {"tensor 'a'", "field 'data_offsets' must be [begin, end]"});
  expect_bad_file(dir, "offsneg.safetensors",
                  file_with_entry(R"({"dtype":"F32","shape":[2],"data_offsets":[-8,8]})"),
                  {"tensor 'a'", "field 'data_offsets' must be [begin, end]"});
}

TEST_CASE("An unknown dtype string is rejected, listing the known ones", "[unit][io]") {
  TempDir dir;
  expect_bad_file(dir, "f7.safetensors",
                  file_with_entry(R"({"dtype":"F7","shape":[2],"data_offsets":[0,8]})"),
                  {"tensor 'a'", "unknown dtype 'F7'", "BF16"});
  expect_bad_file(dir, "lower.safetensors",
                  file_with_entry(R"({"dtype":"f32","shape":[2],"data_offsets":[0,8]})"),
                  {"unknown dtype 'f32'"});
}

TEST_CASE("Offsets past the data region or with begin > end are rejected", "[unit][io]") {
  TempDir dir;
  expect_bad_file(dir, "past.safetensors",
                  file_with_entry(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"),
                  {"tensor 'a'", "data_offsets [0, 16] run past the end of the 8-byte data region"});
  expect_bad_file(dir, "backwards.safetensors",
                  file_with_entry(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"),
                  {"tensor 'a'", "data_offsets [8, 0] have begin > end"});
}

TEST_CASE("A byte range that disagrees with shape and dtype is rejected", "[unit][io]") {
  TempDir dir;
  expect_bad_file(dir, "size.safetensors",
                  file_with_entry(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"),
                  {"tensor 'a'", "span 8 bytes, but dtype F32 with shape [3] needs 12"});
  expect_bad_file(dir, "f16size.safetensors",
                  file_with_entry(R"({"dtype":"F16","shape":[2,3],"data_offsets":[0,8]})"),
                  {"span 8 bytes, but dtype F16 with shape [2,3] needs 12"});
  expect_bad_file(dir, "overflow.safetensors",
                  file_with_entry(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})"),
                  {"tensor 'a'", "overflows"});
  expect_bad_file(dir, "f4.safetensors",
                  file_with_entry(R"({"dtype":"F4","shape":[3],"data_offsets":[0,8]})"),
                  {"tensor 'a'", "3 elements of F4 (4 bits each) do not fill whole bytes"});
}

TEST_CASE("Overlapping tensors are rejected naming both", "[unit][io]") {
  TempDir dir;
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_bad_file(dir, "overlap.safetensors", safetensors_bytes(header, std::string(12, '\0')),
                  {"tensors 'a' [0, 8) and 'b' [4, 12) overlap"});
  const std::string same = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  expect_bad_file(dir, "alias.safetensors", safetensors_bytes(same, std::string(8, '\0')), {"overlap"});
}

TEST_CASE("Holes in the data region are rejected with their byte range", "[unit][io]") {
  TempDir dir;
  const std::string gap = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  expect_bad_file(dir, "gap.safetensors", safetensors_bytes(gap, std::string(12, '\0')),
                  {"the data region has a hole: bytes [4, 8) belong to no tensor"});
  const std::string late = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  expect_bad_file(dir, "late.safetensors", safetensors_bytes(late, std::string(8, '\0')),
                  {"hole: bytes [0, 4)"});
  expect_bad_file(dir, "tail.safetensors",
                  file_with_entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 11),
                  {"hole: bytes [8, 11) after the last tensor"});
  expect_bad_file(dir, "nodata.safetensors", safetensors_bytes("{}", "xyz"), {"hole: bytes [0, 3)"});
}

TEST_CASE("Asking for a tensor the file lacks names the file and tensor", "[unit][io]") {
  TempDir dir;
  const auto path = dir / "one.safetensors";
  write_file(path, file_with_entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"));
  const SafetensorsFile f(path);
  check_throws<ModelLoadError>([&] { (void)f.info("b"); }, {"one.safetensors", "no tensor named 'b'"});
  check_throws<ModelLoadError>([&] { (void)f.view("b"); }, {"one.safetensors", "'b'"});
  check_throws<ModelLoadError>([&] { (void)f.bytes("b"); }, {"one.safetensors", "'b'"});
}

TEST_CASE("A tensor with more dimensions than a TensorView holds opens but does not view", "[unit][io]") {
  TempDir dir;
  const auto path = dir / "7d.safetensors";
  write_file(path, file_with_entry(R"({"dtype":"U8","shape":[1,1,1,1,1,2,4],"data_offsets":[0,8]})"));
  const SafetensorsFile f(path);
  CHECK(f.bytes("a").size() == 8);
  check_throws<specdec::UnsupportedError>([&] { (void)f.view("a"); }, {"7d.safetensors", "7 dimensions"});
}
