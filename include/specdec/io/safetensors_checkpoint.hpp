// Hugging Face checkpoints in safetensors form, single-file or sharded.
//
// A checkpoint directory (what transformers' save_pretrained writes) holds
// either `model.safetensors`, or shards `model-00001-of-0000N.safetensors`
// and `model.safetensors.index.json`:
//   {"metadata": {"total_size": 123}, "weight_map": {tensor: shard file}}
// SafetensorsCheckpoint opens all shards (memory-mapped, see safetensors.hpp)
// and looks tensors up across them.
//
// Checks, each a ModelLoadError naming the index file: the weight map names a
// shard that does not exist, maps a tensor to a shard that lacks it, or names a
// tensor twice; two shards both hold the same tensor. Shard names must be
// relative paths without "..". Tensors present in a shard but missing from the
// weight map are accepted and visible (transformers loads whole shards too).
// "total_size" is not checked (writers disagree on what it counts).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/io/safetensors.hpp"

namespace specdec::io {

inline constexpr std::string_view kSafetensorsSingleName = "model.safetensors";
inline constexpr std::string_view kSafetensorsIndexName = "model.safetensors.index.json";

class SafetensorsCheckpoint {
 public:
  // `path` is a checkpoint directory (model.safetensors is preferred over the
  // index when both exist, as transformers does), an index .json file, or a
  // single .safetensors file. Throws ModelLoadError.
  explicit SafetensorsCheckpoint(const std::filesystem::path& path);

  // The file opened: the index, or the single .safetensors file.
  const std::filesystem::path& path() const { return path_; }
  bool is_sharded() const { return sharded_; }
  const std::vector<SafetensorsFile>& shards() const { return shards_; }

  // Tensor names across all shards, sorted.
  const std::vector<std::string>& names() const { return names_; }
  std::size_t num_tensors() const { return names_.size(); }
  bool contains(std::string_view name) const { return shard_of_.find(name) != shard_of_.end(); }
  // The following throw ModelLoadError naming the checkpoint for a missing
  // tensor; view() as SafetensorsFile::view.
  const SafetensorsFile& file_of(std::string_view name) const;
  const TensorInfo& info(std::string_view name) const { return file_of(name).info(name); }
  std::span<const std::byte> bytes(std::string_view name) const { return file_of(name).bytes(name); }
  TensorView view(std::string_view name) const { return file_of(name).view(name); }

  // Sharded: the index's "metadata", values that are not strings as their
  // JSON text ("total_size" -> "123"). Single file: its __metadata__.
  const Metadata& metadata() const { return metadata_; }

 private:
  void open_index(const std::filesystem::path& index);

  std::filesystem::path path_;
  bool sharded_ = false;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, std::size_t, std::less<>> shard_of_;
  std::vector<std::string> names_;
  Metadata metadata_;
};

// Writes a checkpoint directory (created if missing) as save_pretrained does:
// a single model.safetensors when all tensors fit in `max_shard_bytes`,
// otherwise shards model-0000i-of-0000N.safetensors (filled in name order; a
// tensor larger than the limit gets a shard of its own) and the index, with
// {"total_size": data bytes} as its metadata. Every safetensors file gets
// `metadata` as its __metadata__ (transformers writes {"format": "pt"}).
// Removes a model.safetensors or index left over from the other layout so the
// directory opens as what was just written. Throws as save_safetensors.
void save_safetensors_checkpoint(const std::filesystem::path& dir, const std::vector<NamedTensor>& tensors,
                                 const Metadata& metadata = {},
                                 std::uint64_t max_shard_bytes = 5'000'000'000);

}  // namespace specdec::io
