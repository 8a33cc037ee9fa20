// Reading and writing single .safetensors files (the Hugging Face tensor file
// format, https://huggingface.co/docs/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON
//   {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [..],
//                                       "data_offsets": [begin, end]}, ...}
// and then the data region; offsets are relative to the byte after the header.
//
// Reading memory-maps the file read-only and validates the whole header up
// front, as the reference implementation does, so a file that opens is one
// whose every tensor is readable: offsets in range, begin <= end, byte size =
// product(shape) * dtype size, tensors neither overlapping nor leaving holes,
// the last tensor ending at the end of the file. Every problem throws
// ModelLoadError naming the file and what is wrong.
//
// Dtypes. Every dtype of the format (BOOL, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0,
// I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64, and the sub-byte F4,
// F6_E2M3, F6_E3M2) is accepted when the file is opened and its sizes are
// checked; a dtype string outside that list is a malformed file
// (ModelLoadError). Tensors whose dtype has no specdec DType (e.g. F8_E4M3)
// are listed and their bytes() readable, but view() throws UnsupportedError
// for them: a checkpoint with an FP8 tensor we never read still loads.
//
// Checksums. The format has none, so a bit flipped in a tensor's data goes
// unseen by the reader. The files specdec writes carry the CRC-32C of their
// data region in __metadata__ under kChecksumKey (8 lowercase hex digits);
// opening a file that has one reads the whole data region and throws
// ModelLoadError when it does not match. Files from other writers open
// unchecked (weight_view() still refuses an inf or NaN weight: weights.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/core/tensor_view.hpp"

namespace specdec::io {

// The __metadata__ key of the data region's CRC-32C (crc32c.hpp).
inline constexpr std::string_view kChecksumKey = "specdec.crc32c";

// "F32", "F16", "BF16", "F64", "I32", "I64", "U8".
std::string_view safetensors_dtype_name(DType t);
// The DType for a safetensors dtype string; nullopt for strings without one.
std::optional<DType> dtype_from_safetensors(std::string_view name);

// One tensor's header entry.
struct TensorInfo {
  std::string dtype_name;           // as in the header: "F32", "BF16", "F8_E4M3", ...
  std::optional<DType> dtype;       // nullopt: a valid safetensors dtype with no specdec DType
  std::vector<std::int64_t> shape;  // [] for a scalar
  std::uint64_t begin = 0;          // byte range [begin, end) relative to the data region
  std::uint64_t end = 0;

  std::uint64_t nbytes() const { return end - begin; }
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (const std::int64_t d : shape) n *= d;
    return n;
  }
};

// __metadata__ of a file (string to string by the format's definition).
using Metadata = std::map<std::string, std::string, std::less<>>;

// A memory-mapped, validated .safetensors file. Move-only; views and spans it
// hands out point into the mapping and stay valid while it lives (moving the
// object does not move the mapping). The mapping is read-only: writing
// through a view's data() faults.
class SafetensorsFile {
 public:
  // Throws ModelLoadError when the file is missing, unreadable or malformed.
  explicit SafetensorsFile(std::filesystem::path path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Tensor names, sorted.
  const std::vector<std::string>& names() const { return names_; }
  std::size_t num_tensors() const { return names_.size(); }
  bool contains(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }
  // Throws ModelLoadError naming the file when there is no such tensor.
  const TensorInfo& info(std::string_view name) const;
  // The tensor's raw little-endian bytes, for any dtype.
  std::span<const std::byte> bytes(std::string_view name) const;
  // Zero-copy contiguous host view. Throws UnsupportedError when the dtype has
  // no DType or the tensor has more than TensorView::kMaxDims dimensions. The
  // pointer is aligned to the element size whenever the writer aligned the
  // data (ours and safetensors >= 0.3 do); see is_aligned().
  TensorView view(std::string_view name) const;
  bool is_aligned(std::string_view name) const;
  const Metadata& metadata() const { return metadata_; }
  // N, the JSON header's length in bytes (padding included).
  std::uint64_t header_size() const { return data_offset_ - 8; }
  std::uint64_t data_size() const { return map_size_ - data_offset_; }

 private:
  void parse();
  void release() noexcept;
  const std::byte* data_begin() const { return static_cast<const std::byte*>(map_) + data_offset_; }

  std::filesystem::path path_;
  void* map_ = nullptr;
  std::size_t map_size_ = 0;
  std::uint64_t data_offset_ = 0;  // 8 + N
  std::map<std::string, TensorInfo, std::less<>> tensors_;
  std::vector<std::string> names_;
  Metadata metadata_;
};

using NamedTensor = std::pair<std::string, TensorView>;

// Writes contiguous host tensors as a .safetensors file laid out exactly as
// the reference writer (safetensors' Rust `serialize`, behind Python's
// save_file) lays it out: compact JSON header with __metadata__ first (when
// non-empty) and then the tensors in data order, padded with spaces to a
// multiple of 8 bytes; tensors ordered by descending dtype (so every tensor is
// aligned to its element size), then by name; offsets contiguous. With
// Checksum::kCrc32c (the default) __metadata__ also gets kChecksumKey, the
// data region's CRC-32C, which the reader checks; kNone writes `metadata`
// alone (byte for byte what the reference writer writes). Writes to
// `path` + ".tmp" and renames, so readers never see a partial file.
// Throws InvalidArgumentError for duplicate names, a tensor named
// "__metadata__" or metadata holding kChecksumKey, UnsupportedError for device
// or strided tensors, IoError when the file cannot be written.
enum class Checksum { kNone, kCrc32c };
void save_safetensors(const std::filesystem::path& path, const std::vector<NamedTensor>& tensors,
                      const Metadata& metadata = {}, Checksum checksum = Checksum::kCrc32c);

}  // namespace specdec::io
