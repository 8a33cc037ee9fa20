// Sharded safetensors checkpoints: index parsing, cross-shard lookup, writing.
#include "specdec/io/safetensors_checkpoint.hpp"

#include <algorithm>
#include <set>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "specdec/core/error.hpp"
#include "specdec/io/file_io.hpp"

namespace specdec::io {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

[[noreturn]] void load_error(const fs::path& where, std::string_view what) {
  throw ModelLoadError(fmt::format("{}: {}", where.string(), what));
}

// A shard name must stay inside the checkpoint directory.
bool is_safe_relative(const fs::path& p) {
  if (p.empty() || p.is_absolute()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return true;
}

}  // namespace

SafetensorsCheckpoint::SafetensorsCheckpoint(const fs::path& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) load_error(path, "checkpoint path does not exist");
  if (fs::is_directory(st)) {
    const fs::path single = path / kSafetensorsSingleName;
    const fs::path index = path / kSafetensorsIndexName;
    if (fs::exists(single, ec)) {
      path_ = single;
    } else if (fs::exists(index, ec)) {
      path_ = index;
    } else {
      load_error(path, fmt::format("directory holds neither {} nor {}", kSafetensorsSingleName,
                                   kSafetensorsIndexName));
    }
  } else {
    path_ = path;
  }
  if (path_.extension() == ".json") {
    sharded_ = true;
    open_index(path_);
  } else {
    shards_.emplace_back(path_);
    for (const auto& name : shards_.front().names()) shard_of_.emplace(name, 0);
    metadata_ = shards_.front().metadata();
  }
  names_.reserve(shard_of_.size());
  for (const auto& kv : shard_of_) names_.push_back(kv.first);
}

void SafetensorsCheckpoint::open_index(const fs::path& index) {
  const std::string text = read_text_file(index);
  // JSON allows repeated keys (nlohmann keeps the last); a weight map naming a
  // tensor twice is ambiguous about its shard, so catch it while parsing.
  std::string top_key;
  std::set<std::string, std::less<>> seen;
  std::string duplicate;
  const auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1) top_key = parsed.get<std::string>();
    if (event == json::parse_event_t::key && depth == 2 && top_key == "weight_map") {
      auto key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = std::move(key);
    }
    return true;
  };
  // nlohmann stops at a NUL as if the input ended; JSON never contains one raw.
  if (const auto nul = text.find('\0'); nul != std::string::npos)
    load_error(index, fmt::format("not valid JSON: NUL byte at offset {}", nul));
  json doc;
  try {
    doc = json::parse(text, on_event);
  } catch (const json::exception& e) {
    load_error(index, fmt::format("not valid JSON: {}", e.what()));
  }
  if (!doc.is_object()) load_error(index, fmt::format("expected a JSON object, got {}", doc.type_name()));
  if (!duplicate.empty())
    load_error(index, fmt::format("weight_map names tensor '{}' twice (in two shards?)", duplicate));
  if (!doc.contains("weight_map")) load_error(index, "missing field 'weight_map'");
  const json& weight_map = doc["weight_map"];
  if (!weight_map.is_object())
    load_error(index, fmt::format("field 'weight_map' must be an object, got {}", weight_map.type_name()));
  if (doc.contains("metadata")) {
    const json& meta = doc["metadata"];
    if (!meta.is_object() && !meta.is_null())
      load_error(index, fmt::format("field 'metadata' must be an object, got {}", meta.type_name()));
    if (meta.is_object())
      for (const auto& item : meta.items())
        metadata_.emplace(item.key(),
                          item.value().is_string() ? item.value().get<std::string>() : item.value().dump());
  }

  // Open each shard once, in name order.
  std::map<std::string, std::size_t, std::less<>> shard_index;
  for (const auto& item : weight_map.items()) {
    if (!item.value().is_string())
      load_error(index, fmt::format("weight_map: tensor '{}' must map to a shard file name, got {}",
                                    item.key(), item.value().type_name()));
    const std::string shard = item.value().get<std::string>();
    if (!is_safe_relative(shard))
      load_error(index, fmt::format("weight_map: tensor '{}' maps to '{}', not a file name relative to the "
                                    "index",
                                    item.key(), shard));
    shard_index.emplace(shard, 0);
  }
  const fs::path dir = index.parent_path();
  for (auto& [shard, slot] : shard_index) {
    const fs::path file = dir / shard;
    std::error_code ec;
    if (!fs::exists(file, ec))
      load_error(index,
                 fmt::format("weight_map names shard '{}', but {} does not exist", shard, file.string()));
    slot = shards_.size();
    shards_.emplace_back(file);
    for (const auto& name : shards_.back().names()) {
      const auto [it, fresh] = shard_of_.emplace(name, slot);
      if (!fresh)
        load_error(index, fmt::format("tensor '{}' is in two shards: {} and {}", name,
                                      shards_[it->second].path().filename().string(), shard));
    }
  }
  for (const auto& item : weight_map.items()) {
    const std::string shard = item.value().get<std::string>();
    if (!shards_[shard_index.at(shard)].contains(item.key()))
      load_error(index, fmt::format("weight_map puts tensor '{}' in shard '{}', which does not hold it",
                                    item.key(), shard));
  }
}

const SafetensorsFile& SafetensorsCheckpoint::file_of(std::string_view name) const {
  const auto it = shard_of_.find(name);
  if (it == shard_of_.end()) load_error(path_, fmt::format("checkpoint has no tensor named '{}'", name));
  return shards_[it->second];
}

void save_safetensors_checkpoint(const fs::path& dir, const std::vector<NamedTensor>& tensors,
                                 const Metadata& metadata, std::uint64_t max_shard_bytes) {
  if (max_shard_bytes == 0) throw InvalidArgumentError("save_safetensors_checkpoint: max_shard_bytes is 0");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError(fmt::format("{}: cannot create directory: {}", dir.string(), ec.message()));

  std::vector<const NamedTensor*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const NamedTensor* a, const NamedTensor* b) { return a->first < b->first; });
  for (std::size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i - 1]->first == sorted[i]->first)
      throw InvalidArgumentError(fmt::format("{}: tensor '{}' given twice", dir.string(), sorted[i]->first));
  std::vector<std::vector<NamedTensor>> shards(1);
  std::uint64_t shard_bytes = 0;
  std::uint64_t total = 0;
  for (const NamedTensor* t : sorted) {
    const auto n = static_cast<std::uint64_t>(t->second.numel()) * dtype_size(t->second.dtype());
    if (!shards.back().empty() && shard_bytes + n > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(*t);
    shard_bytes += n;
    total += n;
  }

  if (shards.size() == 1) {
    save_safetensors(dir / kSafetensorsSingleName, shards.front(), metadata);
    fs::remove(dir / kSafetensorsIndexName, ec);
    return;
  }
  nlohmann::ordered_json index;
  index["metadata"]["total_size"] = total;
  auto& weight_map = index["weight_map"] = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    save_safetensors(dir / file, shards[i], metadata);
    for (const auto& t : shards[i]) weight_map[t.first] = file;  // already in name order
  }
  const std::string text = index.dump(2) + "\n";
  write_text_atomically(dir / kSafetensorsIndexName, text);
  fs::remove(dir / kSafetensorsSingleName, ec);
}

}  // namespace specdec::io
