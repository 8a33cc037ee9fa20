// .safetensors reader (mmap + full header validation) and writer.
#include "specdec/io/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "specdec/core/error.hpp"
#include "specdec/io/crc32c.hpp"
#include "specdec/io/file_io.hpp"

namespace specdec::io {
namespace {

using json = nlohmann::json;

// The reference implementation's limit (safetensors MAX_HEADER_SIZE).
constexpr std::uint64_t kMaxHeaderSize = 100'000'000;

struct DTypeEntry {
  std::string_view name;
  std::uint32_t bits;
  std::optional<DType> dtype;
  int rank;  // position in safetensors' Dtype enum: the writer orders by it, descending
};

constexpr std::array<DTypeEntry, 20> kDTypes{{
    {"BOOL", 8, std::nullopt, 0},    {"F4", 4, std::nullopt, 1},      {"F6_E2M3", 6, std::nullopt, 2},
    {"F6_E3M2", 6, std::nullopt, 3}, {"U8", 8, DType::kU8, 4},        {"I8", 8, std::nullopt, 5},
    {"F8_E5M2", 8, std::nullopt, 6}, {"F8_E4M3", 8, std::nullopt, 7}, {"F8_E8M0", 8, std::nullopt, 8},
    {"I16", 16, std::nullopt, 9},    {"U16", 16, std::nullopt, 10},   {"F16", 16, DType::kF16, 11},
    {"BF16", 16, DType::kBF16, 12},  {"I32", 32, DType::kI32, 13},    {"U32", 32, std::nullopt, 14},
    {"F32", 32, DType::kF32, 15},    {"C64", 64, std::nullopt, 16},   {"F64", 64, DType::kF64, 17},
    {"I64", 64, DType::kI64, 18},    {"U64", 64, std::nullopt, 19},
}};

const DTypeEntry* find_dtype(std::string_view name) {
  for (const auto& e : kDTypes)
    if (e.name == name) return &e;
  return nullptr;
}

const DTypeEntry& entry_of(DType t) {
  for (const auto& e : kDTypes)
    if (e.dtype == t) return e;
  throw UnsupportedError(fmt::format("safetensors: no dtype name for {}", dtype_name(t)));
}

std::string known_dtype_list() {
  std::string out;
  for (const auto& e : kDTypes) out += fmt::format("{}{}", out.empty() ? "" : ", ", e.name);
  return out;
}

// A JSON value as it appears in a message: its type and (shortened) text.
std::string describe(const json& v) {
  std::string text = v.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return fmt::format("{} {}", v.type_name(), text);
}

std::uint64_t read_le_u64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

[[noreturn]] void load_error(std::string_view where, std::string_view what) {
  throw ModelLoadError(fmt::format("{}: {}", where, what));
}

// Non-negative JSON integer, or nullopt.
std::optional<std::uint64_t> as_u64(const json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(v.get<std::int64_t>());
  return std::nullopt;
}

}  // namespace

std::string_view safetensors_dtype_name(DType t) {
  return entry_of(t).name;
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  const DTypeEntry* e = find_dtype(name);
  return e ? e->dtype : std::nullopt;
}

SafetensorsFile::SafetensorsFile(std::filesystem::path path) : path_(std::move(path)) {
  const std::string where = path_.string();
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ModelLoadError(fmt::format("{}: cannot open: {}", where, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ModelLoadError(fmt::format("{}: not a readable regular file", where));
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    throw ModelLoadError(fmt::format(
        "{}: file is {} bytes, shorter than the 8-byte header length prefix of a safetensors file", where,
        size));
  }
  void* map = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file referenced
  if (map == MAP_FAILED)
    throw ModelLoadError(fmt::format("{}: cannot memory-map: {}", where, std::strerror(map_errno)));
  map_ = map;
  map_size_ = static_cast<std::size_t>(size);
  try {
    parse();
  } catch (...) {
    release();
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  release();
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_size_(std::exchange(other.map_size_, 0)),
      data_offset_(std::exchange(other.data_offset_, 0)),
      tensors_(std::move(other.tensors_)),
      names_(std::move(other.names_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    data_offset_ = std::exchange(other.data_offset_, 0);
    tensors_ = std::move(other.tensors_);
    names_ = std::move(other.names_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

void SafetensorsFile::release() noexcept {
  if (map_ != nullptr) ::munmap(map_, map_size_);
  map_ = nullptr;
  map_size_ = 0;
}

void SafetensorsFile::parse() {
  const std::string where = path_.string();
  const auto* bytes = static_cast<const unsigned char*>(map_);
  const std::uint64_t size = map_size_;

  const std::uint64_t n = read_le_u64(bytes);
  if (n > kMaxHeaderSize)
    load_error(where,
               fmt::format("header length {} exceeds the {}-byte limit (corrupt file or not safetensors)", n,
                           kMaxHeaderSize));
  if (n > size - 8)
    load_error(where, fmt::format("header length {} exceeds the {} bytes after the 8-byte length prefix", n,
                                  size - 8));
  data_offset_ = 8 + n;
  const std::uint64_t data_size = size - data_offset_;

  // Parse, remembering top-level keys seen twice (JSON allows it, nlohmann
  // keeps the last one; a safetensors header must not).
  std::set<std::string, std::less<>> seen;
  std::string duplicate;
  const auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1) {
      auto key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = std::move(key);
    }
    return true;
  };
  const char* text = reinterpret_cast<const char*>(bytes + 8);
  // nlohmann stops at a NUL as if the input ended; JSON never contains one raw.
  if (const void* nul = std::memchr(text, 0, n))
    load_error(where, fmt::format("header is not valid JSON: NUL byte at header offset {}",
                                  static_cast<const char*>(nul) - text));
  json header;
  try {
    header = json::parse(text, text + n, on_event);
  } catch (const json::exception& e) {
    load_error(where, fmt::format("header is not valid JSON: {}", e.what()));
  }
  if (!header.is_object())
    load_error(where, fmt::format("header must be a JSON object, got {}", describe(header)));
  if (!duplicate.empty()) load_error(where, fmt::format("header names '{}' twice", duplicate));

  struct Span {
    std::uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object())
        load_error(where, fmt::format("__metadata__ must be an object, got {}", describe(entry)));
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          load_error(where, fmt::format("__metadata__ '{}' must be a string, got {}", key, describe(value)));
        metadata_.emplace(key, value.get<std::string>());
      }
      continue;
    }
    const std::string at = fmt::format("{}: tensor '{}'", where, name);
    if (!entry.is_object()) load_error(at, fmt::format("entry must be an object, got {}", describe(entry)));
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!entry.contains(field)) load_error(at, fmt::format("missing field '{}'", field));
    const json& jdtype = entry["dtype"];
    const json& jshape = entry["shape"];
    const json& joffsets = entry["data_offsets"];
    if (!jdtype.is_string())
      load_error(at, fmt::format("field 'dtype' must be a string, got {}", describe(jdtype)));
    if (!jshape.is_array())
      load_error(at, fmt::format("field 'shape' must be an array of non-negative integers, got {}",
                                 describe(jshape)));
    if (!joffsets.is_array() || joffsets.size() != 2 || !as_u64(joffsets[0]) || !as_u64(joffsets[1]))
      load_error(at,
                 fmt::format("field 'data_offsets' must be [begin, end] with non-negative integers, got {}",
                             describe(joffsets)));

    TensorInfo info;
    info.dtype_name = jdtype.get<std::string>();
    const DTypeEntry* dt = find_dtype(info.dtype_name);
    if (dt == nullptr)
      load_error(at,
                 fmt::format("unknown dtype '{}' (expected one of {})", info.dtype_name, known_dtype_list()));
    info.dtype = dt->dtype;

    // Elements and bytes, with the overflow checks the format requires.
    std::uint64_t numel = 1;
    for (const json& d : jshape) {
      const auto dim = as_u64(d);
      if (!dim)
        load_error(at, fmt::format("field 'shape' must be an array of non-negative integers, got {}",
                                   describe(jshape)));
      if (*dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
          (*dim != 0 && numel > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / *dim))
        load_error(at, fmt::format("shape {} overflows the element count", jshape.dump()));
      numel *= *dim;
      info.shape.push_back(static_cast<std::int64_t>(*dim));
    }
    if (numel > std::numeric_limits<std::uint64_t>::max() / dt->bits)
      load_error(at, fmt::format("shape {} overflows the byte size", jshape.dump()));
    const std::uint64_t bits = numel * dt->bits;
    if (bits % 8 != 0)
      load_error(at, fmt::format("{} elements of {} ({} bits each) do not fill whole bytes", numel, dt->name,
                                 dt->bits));
    const std::uint64_t need = bits / 8;

    info.begin = *as_u64(joffsets[0]);
    info.end = *as_u64(joffsets[1]);
    if (info.begin > info.end)
      load_error(at, fmt::format("data_offsets [{}, {}] have begin > end", info.begin, info.end));
    if (info.end > data_size)
      load_error(at, fmt::format("data_offsets [{}, {}] run past the end of the {}-byte data region",
                                 info.begin, info.end, data_size));
    if (info.nbytes() != need)
      load_error(at, fmt::format("data_offsets [{}, {}] span {} bytes, but dtype {} with shape {} needs {}",
                                 info.begin, info.end, info.nbytes(), info.dtype_name, jshape.dump(), need));
    auto it = tensors_.emplace(name, std::move(info)).first;
    spans.push_back({it->second.begin, it->second.end, &it->first});
  }

  // The tensors must tile the data region exactly: sorted by offsets, each
  // starts where the previous ended, and the last ends at the end of file.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t cursor = 0;
  const Span* prev = nullptr;
  for (const Span& s : spans) {
    if (s.begin < cursor)
      load_error(where, fmt::format("tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", *prev->name,
                                    prev->begin, prev->end, *s.name, s.begin, s.end));
    if (s.begin > cursor)
      load_error(where, fmt::format("the data region has a hole: bytes [{}, {}) belong to no tensor", cursor,
                                    s.begin));
    cursor = s.end;
    prev = &s;
  }
  if (cursor != data_size)
    load_error(
        where,
        fmt::format("the data region has a hole: bytes [{}, {}) after the last tensor belong to no tensor",
                    cursor, data_size));

  names_.reserve(tensors_.size());
  for (const auto& kv : tensors_) names_.push_back(kv.first);

  if (const auto it = metadata_.find(kChecksumKey); it != metadata_.end()) {
    const std::string& value = it->second;
    const bool hex = value.size() == 8 && std::all_of(value.begin(), value.end(), [](char c) {
                       return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                     });
    if (!hex)
      load_error(where, fmt::format("__metadata__ '{}' must be 8 lowercase hex digits, got \"{}\"",
                                    kChecksumKey, value.size() > 20 ? value.substr(0, 17) + "..." : value));
    const auto expected = static_cast<std::uint32_t>(std::stoul(value, nullptr, 16));
    const std::uint32_t got = crc32c(std::span(data_begin(), static_cast<std::size_t>(data_size)));
    if (got != expected)
      load_error(where,
                 fmt::format("the data region fails its checksum ({} {:08x}, the data's {:08x}): the file "
                             "is corrupt",
                             kChecksumKey, expected, got));
  }
}

const TensorInfo& SafetensorsFile::info(std::string_view name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end())
    throw ModelLoadError(fmt::format("{}: no tensor named '{}'", path_.string(), name));
  return it->second;
}

std::span<const std::byte> SafetensorsFile::bytes(std::string_view name) const {
  const TensorInfo& t = info(name);
  return {data_begin() + t.begin, static_cast<std::size_t>(t.nbytes())};
}

bool SafetensorsFile::is_aligned(std::string_view name) const {
  const TensorInfo& t = info(name);
  const DTypeEntry* dt = find_dtype(t.dtype_name);
  const std::uint64_t align = std::max<std::uint64_t>(1, dt->bits / 8);
  return reinterpret_cast<std::uintptr_t>(data_begin() + t.begin) % align == 0;
}

TensorView SafetensorsFile::view(std::string_view name) const {
  const TensorInfo& t = info(name);
  if (!t.dtype)
    throw UnsupportedError(
        fmt::format("{}: tensor '{}' has dtype {}, which specdec cannot view (supported: "
                    "F32, F16, BF16, F64, I32, I64, U8); its bytes() are still readable",
                    path_.string(), name, t.dtype_name));
  if (t.shape.size() > static_cast<std::size_t>(TensorView::kMaxDims))
    throw UnsupportedError(fmt::format("{}: tensor '{}' has {} dimensions, a TensorView at most {}",
                                       path_.string(), name, t.shape.size(), TensorView::kMaxDims));
  // The mapping is PROT_READ; TensorView has no const flavour.
  void* data = const_cast<std::byte*>(data_begin() + t.begin);
  return TensorView(data, *t.dtype, t.shape.data(), static_cast<int>(t.shape.size()), nullptr);
}

void save_safetensors(const std::filesystem::path& path, const std::vector<NamedTensor>& tensors,
                      const Metadata& metadata, Checksum checksum) {
  const std::string where = path.string();
  if (metadata.contains(kChecksumKey))
    throw InvalidArgumentError(
        fmt::format("{}: the metadata key '{}' is the writer's own", where, kChecksumKey));
  std::vector<std::size_t> order(tensors.size());
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    order[i] = i;
    if (name == "__metadata__")
      throw InvalidArgumentError(fmt::format("{}: '__metadata__' is reserved, not a tensor name", where));
    if (!names.insert(name).second)
      throw InvalidArgumentError(fmt::format("{}: tensor '{}' given twice", where, name));
    if (t.device().kind != DeviceKind::kCPU)
      throw UnsupportedError(fmt::format("{}: tensor '{}' is not in host memory", where, name));
    if (!t.is_contiguous())
      throw UnsupportedError(fmt::format("{}: tensor '{}' is not contiguous", where, name));
    if (t.numel() > 0 && t.data() == nullptr)
      throw InvalidArgumentError(
          fmt::format("{}: tensor '{}' has {} elements but no data", where, name, t.numel()));
  }
  // safetensors' `prepare`: descending dtype (enum order), then name.
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const int ra = entry_of(tensors[a].second.dtype()).rank;
    const int rb = entry_of(tensors[b].second.dtype()).rank;
    return ra != rb ? ra > rb : tensors[a].first < tensors[b].first;
  });

  std::uint32_t crc = 0;
  for (const std::size_t i : order) {
    const TensorView& t = tensors[i].second;
    const auto nbytes = static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype());
    if (checksum == Checksum::kCrc32c && nbytes > 0)
      crc = crc32c(std::span(static_cast<const std::byte*>(t.data()), nbytes), crc);
  }
  Metadata meta_out = metadata;
  if (checksum == Checksum::kCrc32c) meta_out.emplace(kChecksumKey, fmt::format("{:08x}", crc));

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!meta_out.empty()) {
    auto& meta = header["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : meta_out) meta[k] = v;
  }
  std::vector<std::span<const std::byte>> pieces(2);
  std::uint64_t offset = 0;
  for (const std::size_t i : order) {
    const auto& [name, t] = tensors[i];
    const auto nbytes = static_cast<std::uint64_t>(t.numel()) * dtype_size(t.dtype());
    std::vector<std::int64_t> shape(t.shape_data(), t.shape_data() + t.ndim());
    auto& entry = header[name] = nlohmann::ordered_json::object();
    entry["dtype"] = safetensors_dtype_name(t.dtype());
    entry["shape"] = shape;
    entry["data_offsets"] = {offset, offset + nbytes};
    offset += nbytes;
    if (nbytes > 0)
      pieces.emplace_back(static_cast<const std::byte*>(t.data()), static_cast<std::size_t>(nbytes));
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgumentError(fmt::format("{}: cannot encode the header: {}", where, e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the format pads the header to 8 bytes with spaces
  std::array<unsigned char, 8> prefix{};
  for (std::size_t i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  pieces[0] = std::as_bytes(std::span(prefix));
  pieces[1] = std::as_bytes(std::span(text.data(), text.size()));
  write_file_atomically(path, pieces);
}

}  // namespace specdec::io
