// SafetensorsCheckpoint / save_safetensors_checkpoint: single and sharded
// layouts, a hand-written index as transformers writes it, and each index error.
#include "specdec/io/safetensors_checkpoint.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "io/io_test_util.hpp"
#include "specdec/core/error.hpp"
#include "support/catch.hpp"

using specdec::DType;
using specdec::ModelLoadError;
using specdec::TensorView;
using specdec::io::Metadata;
using specdec::io::NamedTensor;
using specdec::io::SafetensorsCheckpoint;
using specdec::io::save_safetensors;
using specdec::io::save_safetensors_checkpoint;
using namespace specdec::io::testing;

namespace {

// Writes a shard holding the given U8 tensors (4 bytes each, value = index).
void write_u8_shard(const std::filesystem::path& path, const std::vector<std::string>& names) {
  static std::vector<std::uint8_t> bytes{1, 2, 3, 4};
  std::vector<NamedTensor> tensors;
  for (const auto& n : names) tensors.emplace_back(n, TensorView(bytes.data(), DType::kU8, {4}));
  save_safetensors(path, tensors);
}

}  // namespace

TEST_CASE("A checkpoint saved in shards opens from its directory with every tensor intact", "[unit][io]") {
  TempDir dir;
  std::vector<std::vector<float>> weights;
  std::vector<NamedTensor> tensors;
  for (int layer = 0; layer < 5; ++layer) {
    weights.push_back(std::vector<float>(6, static_cast<float>(layer) + 0.5f));
  }
  for (int layer = 0; layer < 5; ++layer)
    tensors.emplace_back(fmt::format("model.layers.{}.weight", layer),
                         TensorView(weights[static_cast<std::size_t>(layer)].data(), DType::kF32, {2, 3}));
  // 24 bytes each, at most 50 per shard: two per shard -> 3 shards.
  save_safetensors_checkpoint(dir.path(), tensors, {{"format", "pt"}}, 50);

  CHECK(std::filesystem::exists(dir / "model-00001-of-00003.safetensors"));
  CHECK(std::filesystem::exists(dir / "model-00003-of-00003.safetensors"));
  CHECK_FALSE(std::filesystem::exists(dir / "model.safetensors"));
  const SafetensorsCheckpoint ckpt(dir.path());
  CHECK(ckpt.is_sharded());
  CHECK(ckpt.path() == dir / "model.safetensors.index.json");
  CHECK(ckpt.shards().size() == 3);
  CHECK(ckpt.num_tensors() == 5);
  CHECK(ckpt.metadata().at("total_size") == "120");
  for (int layer = 0; layer < 5; ++layer) {
    const std::string name = fmt::format("model.layers.{}.weight", layer);
    INFO(name);
    REQUIRE(ckpt.contains(name));
    const TensorView v = ckpt.view(name);
    CHECK(v.size(0) == 2);
    CHECK(v.size(1) == 3);
    CHECK(v.data_as<float>()[5] == static_cast<float>(layer) + 0.5f);
    CHECK(ckpt.info(name).nbytes() == 24);
    CHECK(ckpt.file_of(name).metadata().at("format") == "pt");
    CHECK(ckpt.file_of(name).metadata().contains(specdec::io::kChecksumKey));  // each shard its own
  }
  CHECK(ckpt.file_of("model.layers.4.weight").path().filename() == "model-00003-of-00003.safetensors");

  // Saving again unsharded leaves a directory that opens as the single file.
  save_safetensors_checkpoint(dir.path(), tensors, {}, 1000);
  const SafetensorsCheckpoint single(dir.path());
  CHECK_FALSE(single.is_sharded());
  CHECK(single.path() == dir / "model.safetensors");
  CHECK(single.num_tensors() == 5);
  CHECK_FALSE(std::filesystem::exists(dir / "model.safetensors.index.json"));
}

TEST_CASE("A hand-written index in transformers' format opens, directly or via its directory", "[unit][io]") {
  TempDir dir;
  write_u8_shard(dir / "model-00001-of-00002.safetensors", {"embed", "layer.0"});
  write_u8_shard(dir / "model-00002-of-00002.safetensors", {"layer.1", "lm_head"});
  write_file(dir / "model.safetensors.index.json", R"({
  "metadata": {
    "total_size": 16
  },
  "weight_map": {
    "embed": "model-00001-of-00002.safetensors",
    "layer.0": "model-00001-of-00002.safetensors",
    "layer.1": "model-00002-of-00002.safetensors",
    "lm_head": "model-00002-of-00002.safetensors"
  }
}
)");
  for (const auto& path : {dir.path(), dir / "model.safetensors.index.json"}) {
    const SafetensorsCheckpoint ckpt(path);
    CHECK(ckpt.is_sharded());
    CHECK(ckpt.names() == std::vector<std::string>{"embed", "layer.0", "layer.1", "lm_head"});
    CHECK(ckpt.metadata() == Metadata{{"total_size", "16"}});
    CHECK(ckpt.view("lm_head").data_as<std::uint8_t>()[3] == 4);
    CHECK(ckpt.file_of("layer.0").path().filename() == "model-00001-of-00002.safetensors");
  }
}

TEST_CASE("A single .safetensors file opens as a one-file checkpoint", "[unit][io]") {
  TempDir dir;
  write_u8_shard(dir / "weights.safetensors", {"x"});
  const SafetensorsCheckpoint ckpt(dir / "weights.safetensors");
  CHECK_FALSE(ckpt.is_sharded());
  CHECK(ckpt.names() == std::vector<std::string>{"x"});
  check_throws<ModelLoadError>([&] { (void)ckpt.view("y"); }, {"weights.safetensors", "no tensor named 'y'"});
}

TEST_CASE("A missing path or a directory without a checkpoint is rejected", "[unit][io]") {
  TempDir dir;
  check_throws<ModelLoadError>([&] { SafetensorsCheckpoint c(dir / "nowhere"); },
                               {"nowhere", "does not exist"});
  check_throws<ModelLoadError>([&] { SafetensorsCheckpoint c(dir.path()); },
                               {dir.path().filename().string(),
                                "neither model.safetensors nor "
                                "model.safetensors.index.json"});
}

TEST_CASE("Index errors name the index file and the tensor or shard at fault", "[unit][io]") {
  TempDir dir;
  const auto index = dir / "model.safetensors.index.json";
  write_u8_shard(dir / "s1.safetensors", {"a", "b"});
  write_u8_shard(dir / "s2.safetensors", {"c"});
  const auto expect = [&](const std::string& json, std::initializer_list<std::string_view> needles) {
    write_file(index, json);
    INFO("index: " << json);
    check_throws<ModelLoadError>([&] { SafetensorsCheckpoint c(dir.path()); },
                                 {"model.safetensors.index.json"});
    check_throws<ModelLoadError>([&] { SafetensorsCheckpoint c(dir.path()); }, needles);
  };
  SECTION("a shard that does not exist") {
    expect(R"({"weight_map": {"a": "s1.safetensors", "z": "s9.safetensors"}})",
           {"weight_map names shard 's9.safetensors'", "does not exist"});
  }
  SECTION("a tensor not in the shard the map names") {
    expect(R"({"weight_map": {"a": "s2.safetensors", "c": "s2.safetensors"}})",
           {"weight_map puts tensor 'a' in shard 's2.safetensors', which does not hold it"});
  }
  SECTION("the same tensor in two shards") {
    write_u8_shard(dir / "s3.safetensors", {"b", "d"});
    expect(R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors", "d": "s3.safetensors"}})",
           {"tensor 'b' is in two shards: s1.safetensors and s3.safetensors"});
  }
  SECTION("the same tensor twice in the weight map") {
    expect(R"({"weight_map": {"a": "s1.safetensors", "a": "s2.safetensors"}})",
           {"weight_map names tensor 'a' twice"});
  }
  SECTION("malformed index JSON") {
    expect(R"({"weight_map": {"a": )", {"not valid JSON"});
    expect(std::string(R"({"weight_map": {}})") + std::string("\0x", 2), {"not valid JSON: NUL byte"});
  }
  SECTION("no weight map") {
    expect(R"({"metadata": {}})", {"missing field 'weight_map'"});
  }
  SECTION("a weight map of the wrong type") {
    expect(R"({"weight_map": ["s1.safetensors"]})", {"field 'weight_map' must be an object", "array"});
    expect(R"({"weight_map": {"a": 1}})", {"tensor 'a' must map to a shard file name", "number"});
  }
  SECTION("a shard path leaving the directory") {
    expect(R"({"weight_map": {"a": "../s1.safetensors"}})",
           {"tensor 'a' maps to '../s1.safetensors', not a file name relative to the index"});
    expect(R"({"weight_map": {"a": "/etc/s1.safetensors"}})", {"'/etc/s1.safetensors', not a file name"});
  }
  SECTION("a corrupt shard reports the shard file") {
    write_file(dir / "s4.safetensors", "abc");
    write_file(index, R"({"weight_map": {"x": "s4.safetensors"}})");
    check_throws<ModelLoadError>([&] { SafetensorsCheckpoint c(dir.path()); }, {"s4.safetensors", "shorter"});
  }
}

TEST_CASE("Tensors a shard holds beyond the weight map are still visible", "[unit][io]") {
  TempDir dir;
  write_u8_shard(dir / "s1.safetensors", {"a", "extra"});
  write_file(dir / "model.safetensors.index.json", R"({"weight_map": {"a": "s1.safetensors"}})");
  const SafetensorsCheckpoint ckpt(dir.path());
  CHECK(ckpt.names() == std::vector<std::string>{"a", "extra"});
}

TEST_CASE("save_safetensors_checkpoint puts an oversized tensor in a shard of its own", "[unit][io]") {
  TempDir dir;
  std::vector<float> big(10), small(1);
  save_safetensors_checkpoint(dir.path(),
                              {{"a", TensorView(small.data(), DType::kF32, {1})},
                               {"b", TensorView(big.data(), DType::kF32, {10})},
                               {"c", TensorView(small.data(), DType::kF32, {1})}},
                              {}, 16);
  const SafetensorsCheckpoint ckpt(dir.path());
  REQUIRE(ckpt.shards().size() == 3);
  CHECK(ckpt.file_of("b").names() == std::vector<std::string>{"b"});
  const std::string index = read_file(dir / "model.safetensors.index.json");
  CHECK(index.find(R"("total_size": 48)") != std::string::npos);
  CHECK(index.find(R"("b": "model-00002-of-00003.safetensors")") != std::string::npos);
  check_throws<specdec::InvalidArgumentError>(
      [&] {
        save_safetensors_checkpoint(dir.path(),
                                    {{"a", TensorView(small.data(), DType::kF32, {1})},
                                     {"a", TensorView(big.data(), DType::kF32, {10})}},
                                    {}, 4);
      },
      {"'a' given twice"});
}
