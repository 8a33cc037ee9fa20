#include "specdec/torch/feature_cache.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "specdec/core/error.hpp"
#include "specdec/io/file_io.hpp"
#include "train_data.hpp"

namespace specdec::torch_backend {
using namespace train_data;

namespace {

constexpr const char* kFormat = "specdec-features-1";

std::string dtype_name(at::ScalarType t) {
  if (t == at::kFloat) return "f32";
  if (t == at::kBFloat16) return "bf16";
  throw InvalidArgumentError(fmt::format("feature cache: matmul precision must be f32 or bf16, got {}",
                                         c10::toString(t)));
}

std::uint64_t fnv1a(const std::string& bytes, std::uint64_t h = 0xcbf29ce484222325ull) {
  for (const unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// `count` of the file's non-overlapping windows, drawn by (seed), in file
// order. Fisher-Yates over a 64-bit Mersenne twister, written out so every
// standard library draws the same windows.
std::vector<std::int64_t> pick_windows(std::int64_t num_tokens, std::int64_t window, std::int64_t count,
                                       std::uint64_t seed) {
  const auto grid = num_tokens / window;
  if (count > grid)
    throw InvalidArgumentError(fmt::format(
        "cache-features: {} windows of {} tokens asked for, the token file holds only {} non-overlapping ones",
        count, window, grid));
  std::vector<std::int64_t> all(static_cast<std::size_t>(grid));
  for (std::int64_t i = 0; i < grid; ++i) all[static_cast<std::size_t>(i)] = i * window;
  std::mt19937_64 gen(seed);
  for (std::int64_t i = grid - 1; i > 0; --i)
    std::swap(all[static_cast<std::size_t>(i)], all[static_cast<std::size_t>(gen() % static_cast<std::uint64_t>(i + 1))]);
  all.resize(static_cast<std::size_t>(count));
  std::sort(all.begin(), all.end());
  return all;
}

std::int64_t file_size_or_zero(const std::filesystem::path& p) {
  return std::filesystem::exists(p) ? static_cast<std::int64_t>(std::filesystem::file_size(p)) : 0;
}

nlohmann::json read_meta(const std::filesystem::path& dir) {
  std::ifstream f(dir / "meta.json");
  if (!f) throw ModelLoadError(fmt::format("{}: no meta.json; build the cache with `specdec cache-features`", dir.string()));
  try {
    auto meta = nlohmann::json::parse(f);
    if (meta.value("format", "") != kFormat)
      throw ModelLoadError(fmt::format("{}: not a {} feature cache", dir.string(), kFormat));
    return meta;
  } catch (const nlohmann::json::exception& e) {
    throw ModelLoadError(fmt::format("{}/meta.json: {}", dir.string(), e.what()));
  }
}

}  // namespace

std::string target_fingerprint(const std::filesystem::path& target_dir) {
  const auto config = io::read_text_file(target_dir / "config.json");
  const auto weights = io::read_text_file(target_dir / "model.safetensors");
  return fmt::format("{:016x}-{}-{:016x}", fnv1a(config), weights.size(), fnv1a(weights));
}

FeatureCacheReport build_feature_cache(const FeatureCacheOptions& o,
                                       const std::function<void(const std::string&)>& log) {
  if (o.windows <= 0 || o.window < 2 || o.batch <= 0 || o.time_budget_seconds < 0)
    throw InvalidArgumentError(fmt::format(
        "cache-features: windows ({}) and batch ({}) must be > 0, window ({}) >= 2, time budget >= 0", o.windows,
        o.batch, o.window));
  if (o.threads > 0) at::set_num_threads(o.threads);
  const auto start_time = std::chrono::steady_clock::now();
  const LlamaModel target = LlamaModel::load(o.target_dir);
  const auto d = target.config().hidden_size;
  const auto num_layers = static_cast<std::int32_t>(target.config().num_hidden_layers);
  for (const auto l : o.layers)
    if (l < 0 || l >= num_layers)
      throw InvalidArgumentError(fmt::format(
          "cache-features: layer {} asked for, the target's layers are 0..{}", l, num_layers - 1));
  const auto num_cached_layers = static_cast<std::int64_t>(o.layers.size());
  const auto tokens = read_tokens(o.tokens, target.vocab_size(), o.window);
  const auto starts = pick_windows(static_cast<std::int64_t>(tokens.size()), o.window, o.windows, o.seed);
  const nlohmann::json meta{{"format", kFormat},
                            {"target", std::filesystem::absolute(o.target_dir).string()},
                            {"target_fingerprint", target_fingerprint(o.target_dir)},
                            {"hidden_size", d},
                            {"vocab_size", target.vocab_size()},
                            {"window", o.window},
                            {"windows", o.windows},
                            {"seed", o.seed},
                            {"source", std::filesystem::absolute(o.tokens).string()},
                            {"source_tokens", tokens.size()},
                            {"matmul_dtype", dtype_name(o.matmul_dtype)},
                            {"hidden_dtype", "f16"},
                            {"layers", o.layers},
                            {"starts", starts}};
  std::filesystem::create_directories(o.out_dir);
  const auto meta_path = o.out_dir / "meta.json", tok_path = o.out_dir / "tokens.u16",
             hid_path = o.out_dir / "hidden.f16", lay_path = o.out_dir / "layers.f16";
  if (std::filesystem::exists(meta_path)) {
    auto old = read_meta(o.out_dir);
    if (!old.contains("layers")) old["layers"] = nlohmann::json::array();  // caches made before --layers
    for (const char* key :
         {"target_fingerprint", "window", "windows", "seed", "source_tokens", "matmul_dtype", "layers"})
      if (old.at(key) != meta.at(key))
        throw InvalidArgumentError(fmt::format(
            "cache-features: {} holds a cache made with another {} ({} there, {} now); use another --out",
            o.out_dir.string(), key, old.at(key).dump(), meta.at(key).dump()));
  } else {
    io::write_text_atomically(meta_path, meta.dump(1) + "\n");
  }
  // Whole windows present in both files; a torn last batch is cut off.
  const auto tok_bytes = o.window * 2, hid_bytes = o.window * d * 2,
             lay_bytes = hid_bytes * num_cached_layers;
  auto done = std::min(file_size_or_zero(tok_path) / tok_bytes, file_size_or_zero(hid_path) / hid_bytes);
  if (num_cached_layers > 0) done = std::min(done, file_size_or_zero(lay_path) / lay_bytes);
  { std::ofstream touch_t(tok_path, std::ios::app), touch_h(hid_path, std::ios::app); }
  std::filesystem::resize_file(tok_path, static_cast<std::uintmax_t>(done * tok_bytes));
  std::filesystem::resize_file(hid_path, static_cast<std::uintmax_t>(done * hid_bytes));
  if (num_cached_layers > 0) {
    { std::ofstream touch_l(lay_path, std::ios::app); }
    std::filesystem::resize_file(lay_path, static_cast<std::uintmax_t>(done * lay_bytes));
  }
  FeatureCacheReport report;
  report.windows_total = o.windows;
  report.resumed_from = done;
  if (done > 0) log(fmt::format("resuming {} at window {} of {}", o.out_dir.string(), done, o.windows));
  log(fmt::format(
      "target {} ({} parameters, matmuls in {}); {} windows of {} tokens from {} ({} tokens); {:.2f} GB",
      o.target_dir.string(), target.num_parameters(), dtype_name(o.matmul_dtype), o.windows, o.window,
      o.tokens.string(), tokens.size(),
      static_cast<double>(o.windows * (tok_bytes + hid_bytes + lay_bytes)) / 1e9));
  if (num_cached_layers > 0)
    log(fmt::format("with the outputs of target layers {}", fmt::join(o.layers, ", ")));

  std::ofstream tok_out(tok_path, std::ios::binary | std::ios::app), hid_out(hid_path, std::ios::binary | std::ios::app);
  std::ofstream lay_out;
  if (num_cached_layers > 0) lay_out.open(lay_path, std::ios::binary | std::ios::app);
  at::NoGradGuard no_grad;
  auto window_start = std::chrono::steady_clock::now();
  std::int64_t since = 0;
  std::int64_t w = done;
  for (; w < o.windows;) {
    const auto n = std::min(o.batch, o.windows - w);
    const std::vector<std::int64_t> batch_starts(starts.begin() + w, starts.begin() + w + n);
    const auto batch = windows(tokens, batch_starts, o.window);
    at::Tensor hidden;
    std::vector<at::Tensor> outputs;
    target.forward_train(batch, &hidden, o.matmul_dtype, num_cached_layers > 0 ? &outputs : nullptr);
    const auto h16 = hidden.to(at::kHalf).contiguous();
    if (num_cached_layers > 0) {
      std::vector<at::Tensor> picked;
      for (const auto l : o.layers) picked.push_back(outputs[static_cast<std::size_t>(l)]);
      const auto l16 = at::cat(picked, -1).to(at::kHalf).contiguous();  // [n, window, layers * hidden]
      lay_out.write(static_cast<const char*>(l16.data_ptr()), n * lay_bytes);
      lay_out.flush();
      if (!lay_out)
        throw IoError(fmt::format("cache-features: writing {} failed (disk full?)", lay_path.string()));
    }
    const auto t16 = batch.to(at::kInt).contiguous();
    std::vector<std::uint16_t> ids(static_cast<std::size_t>(n * o.window));
    const auto* tp = t16.data_ptr<std::int32_t>();
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::uint16_t>(tp[i]);
    hid_out.write(static_cast<const char*>(h16.data_ptr()), n * hid_bytes);
    tok_out.write(reinterpret_cast<const char*>(ids.data()), n * tok_bytes);
    hid_out.flush();
    tok_out.flush();
    if (!hid_out || !tok_out)
      throw IoError(fmt::format("cache-features: writing {} failed (disk full?)", o.out_dir.string()));
    w += n;
    since += n;
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - window_start;
    if (dt.count() >= 30.0 || w == o.windows) {
      const double rate = static_cast<double>(since) / dt.count();
      log(fmt::format("window {}/{} | {:.0f} tokens/s | ETA {}", w, o.windows, rate * static_cast<double>(o.window),
                      duration(static_cast<double>(o.windows - w) / rate)));
      window_start = std::chrono::steady_clock::now();
      since = 0;
    }
    const std::chrono::duration<double> ran = std::chrono::steady_clock::now() - start_time;
    if (o.time_budget_seconds > 0 && ran.count() >= o.time_budget_seconds && w < o.windows) break;
  }
  const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - start_time;
  report.windows_done = w;
  report.wall_seconds = wall.count();
  report.finished = w == o.windows;
  return report;
}

FeatureCache FeatureCache::open(const std::filesystem::path& dir, const LlamaModel& target) {
  const auto meta = read_meta(dir);
  FeatureCache c;
  c.dir_ = dir;
  c.windows_ = meta.at("windows").get<std::int64_t>();
  c.window_ = meta.at("window").get<std::int64_t>();
  c.hidden_ = meta.at("hidden_size").get<std::int64_t>();
  c.matmul_dtype_ = meta.at("matmul_dtype").get<std::string>();
  c.layers_ = meta.value("layers", std::vector<std::int32_t>{});
  if (c.hidden_ != target.config().hidden_size || meta.at("vocab_size").get<std::int64_t>() != target.vocab_size())
    throw ModelLoadError(fmt::format("{}: features of a target with hidden size {} and vocabulary {}, not {} and {}",
                                     dir.string(), c.hidden_, meta.at("vocab_size").get<std::int64_t>(),
                                     target.config().hidden_size, target.vocab_size()));
  const auto tok = file_size_or_zero(dir / "tokens.u16"), hid = file_size_or_zero(dir / "hidden.f16");
  if (tok < c.windows_ * c.window_ * 2 || hid < c.windows_ * c.window_ * c.hidden_ * 2)
    throw ModelLoadError(fmt::format("{}: the cache is unfinished ({} of {} windows); run `specdec cache-features` "
                                     "again to complete it",
                                     dir.string(), std::min(tok / (c.window_ * 2), hid / (c.window_ * c.hidden_ * 2)),
                                     c.windows_));
  const auto lay = file_size_or_zero(dir / "layers.f16");
  const auto lay_needed =
      c.windows_ * c.window_ * c.hidden_ * 2 * static_cast<std::int64_t>(c.layers_.size());
  if (lay < lay_needed)
    throw ModelLoadError(fmt::format("{}: layers.f16 holds {} of the {} bytes its meta.json promises",
                                     dir.string(), lay, lay_needed));
  if (!c.layers_.empty()) c.layers_file_.open(dir / "layers.f16", std::ios::binary);
  c.tokens_.open(dir / "tokens.u16", std::ios::binary);
  c.hidden_file_.open(dir / "hidden.f16", std::ios::binary);
  if (!c.tokens_ || !c.hidden_file_) throw ModelLoadError(fmt::format("{}: cannot open the cache files", dir.string()));
  return c;
}

std::pair<at::Tensor, at::Tensor> FeatureCache::read(const std::vector<std::int64_t>& indices, std::int64_t len) const {
  if (len < 1 || len > window_)
    throw InvalidArgumentError(fmt::format("FeatureCache::read: {} positions asked of {}-token windows", len, window_));
  const auto n = static_cast<std::int64_t>(indices.size());
  auto tokens = at::empty({n, len}, at::kLong);
  auto hidden16 = at::empty({n, len, hidden_}, at::kHalf);
  std::vector<std::uint16_t> ids(static_cast<std::size_t>(len));
  for (std::int64_t r = 0; r < n; ++r) {
    const auto w = indices[static_cast<std::size_t>(r)];
    if (w < 0 || w >= windows_)
      throw InvalidArgumentError(fmt::format("FeatureCache::read: window {} of {}", w, windows_));
    tokens_.seekg(w * window_ * 2);
    tokens_.read(reinterpret_cast<char*>(ids.data()), len * 2);
    hidden_file_.seekg(w * window_ * hidden_ * 2);
    hidden_file_.read(static_cast<char*>(hidden16[r].data_ptr()), len * hidden_ * 2);
    if (!tokens_ || !hidden_file_) throw ModelLoadError(fmt::format("{}: read of window {} failed", dir_.string(), w));
    auto* tp = tokens.data_ptr<std::int64_t>() + r * len;
    for (std::int64_t j = 0; j < len; ++j) tp[j] = ids[static_cast<std::size_t>(j)];
  }
  return {tokens, hidden16.to(at::kFloat)};
}

at::Tensor FeatureCache::read_layers(const std::vector<std::int64_t>& indices, std::int64_t len) const {
  if (layers_.empty())
    throw InvalidArgumentError(fmt::format(
        "{}: the cache holds no layer outputs; build it with cache-features --layers", dir_.string()));
  if (len < 1 || len > window_)
    throw InvalidArgumentError(
        fmt::format("FeatureCache::read_layers: {} positions asked of {}-token windows", len, window_));
  const auto n = static_cast<std::int64_t>(indices.size()),
             width = static_cast<std::int64_t>(layers_.size()) * hidden_;
  auto out16 = at::empty({n, len, width}, at::kHalf);
  for (std::int64_t r = 0; r < n; ++r) {
    const auto w = indices[static_cast<std::size_t>(r)];
    if (w < 0 || w >= windows_)
      throw InvalidArgumentError(fmt::format("FeatureCache::read_layers: window {} of {}", w, windows_));
    layers_file_.seekg(w * window_ * width * 2);
    layers_file_.read(static_cast<char*>(out16[r].data_ptr()), len * width * 2);
    if (!layers_file_)
      throw ModelLoadError(fmt::format("{}: read of window {}'s layers failed", dir_.string(), w));
  }
  return out16.to(at::kFloat);
}

EpochSampler::EpochSampler(std::uint64_t seed, std::int64_t windows) : seed_(seed), windows_(windows) {
  if (windows <= 0) throw InvalidArgumentError("EpochSampler: no windows");
}

std::vector<std::int64_t> EpochSampler::step(std::int64_t step, std::int64_t batch) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(batch));
  for (std::int64_t i = 0; i < batch; ++i) {
    const auto g = step * batch + i;
    const auto epoch = g / windows_;
    if (epoch != epoch_) {
      order_.resize(static_cast<std::size_t>(windows_));
      for (std::int64_t k = 0; k < windows_; ++k) order_[static_cast<std::size_t>(k)] = k;
      std::mt19937_64 gen(seed_ * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(epoch));
      for (std::int64_t k = windows_ - 1; k > 0; --k)
        std::swap(order_[static_cast<std::size_t>(k)],
                  order_[static_cast<std::size_t>(gen() % static_cast<std::uint64_t>(k + 1))]);
      epoch_ = epoch;
    }
    out[static_cast<std::size_t>(i)] = order_[static_cast<std::size_t>(g % windows_)];
  }
  return out;
}

}  // namespace specdec::torch_backend
