// A sharded checkpoint's model.safetensors.index.json
// (io::SafetensorsCheckpoint): the JSON, its "metadata" and "weight_map", the
// shard names it gives (relative, no ".."), tensors mapped to shards that lack
// them or named twice, shards that share a tensor. The input is the index of
// a directory (one per process) that holds two valid shards; then every
// tensor is looked up, its info and bytes read.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_target.hpp"
#include "specdec/io/safetensors.hpp"
#include "specdec/io/safetensors_checkpoint.hpp"

namespace {

// <tmp>/specdec_fuzz_index_<pid>/ with model-00001-of-00002.safetensors (a, b)
// and model-00002-of-00002.safetensors (c), written once.
const std::filesystem::path& checkpoint_dir() {
  static const std::filesystem::path dir = [] {
    namespace sd = specdec;
    const auto d =
        std::filesystem::temp_directory_path() / ("specdec_fuzz_index_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    static std::vector<float> a{1, 2, 3, 4}, b{5, 6}, c{7};
    sd::io::save_safetensors(d / "model-00001-of-00002.safetensors",
                             {{"a", sd::TensorView(a.data(), sd::DType::kF32, {2, 2})},
                              {"b", sd::TensorView(b.data(), sd::DType::kF32, {2})}});
    sd::io::save_safetensors(d / "model-00002-of-00002.safetensors",
                             {{"c", sd::TensorView(c.data(), sd::DType::kF32, {1})}});
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto index = checkpoint_dir() / std::string(specdec::io::kSafetensorsIndexName);
  {
    std::ofstream out(index, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  specdec::fuzz::expect_typed_errors([&] {
    const specdec::io::SafetensorsCheckpoint checkpoint(index);
    unsigned sum = 0;
    for (const auto& name : checkpoint.names()) {
      (void)checkpoint.info(name).numel();
      const auto bytes = checkpoint.bytes(name);
      if (!bytes.empty()) sum += static_cast<unsigned>(bytes.front());
    }
    for (const auto& [key, value] : checkpoint.metadata())
      sum += static_cast<unsigned>(key.size() + value.size());
    volatile unsigned sink = sum;
    (void)sink;
  });
  return 0;
}
