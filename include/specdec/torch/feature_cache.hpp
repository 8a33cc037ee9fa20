// A disk cache of a frozen target's features for draft-head training
// (`specdec cache-features`): windows of training tokens with the target's
// final-norm hidden states, stored in f16. A head trainer then reads features
// instead of running the target, and many heads (the ablations, the baseline)
// train on one pass of the target. The target's logits are the hidden states
// times its LM head, recomputed per batch: 8000 × 512 per token, a fifth of the
// default target's forward.
//
// Layout of the directory:
//   meta.json   — format, the target (config fingerprint), window length, the
//                 window start offsets in the token file, windows done so far,
//                 the matmul precision of the target forward;
//   tokens.u16  — [windows, window] uint16 token ids;
//   hidden.f16  — [windows, window, hidden] IEEE half;
//   layers.f16  — with --layers only: [windows, window, layers, hidden], the
//                 raw outputs of those target layers (before the final
//                 norm), which an EAGLE-3 head fuses (arXiv 2503.01840 §3.2).
// Building appends whole batches of windows and then rewrites meta.json
// (through a rename), so an interrupted run loses at most one batch and the
// same command resumes it.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "specdec/torch/llama_model.hpp"

namespace specdec::torch_backend {

struct FeatureCacheOptions {
  std::filesystem::path tokens;      // flat little-endian uint16 token ids (the training split)
  std::filesystem::path target_dir;  // the frozen target
  std::filesystem::path out_dir;
  std::int64_t windows = 30000;      // how many windows to cache
  std::int64_t window = 259;         // tokens per window: anchors + draft steps of the trainer
  std::int64_t batch = 8;            // windows per target forward
  std::uint64_t seed = 1;            // which of the file's non-overlapping windows are taken
  std::vector<std::int32_t> layers;  // target layers (0-based) whose outputs are also cached; empty = none
  at::ScalarType matmul_dtype = at::kFloat;
  int threads = 0;
  double time_budget_seconds = 0.0;  // stop after a whole batch once exceeded; 0 = none
};

struct FeatureCacheReport {
  std::int64_t windows_done = 0, windows_total = 0, resumed_from = 0;
  double wall_seconds = 0.0;
  bool finished = false;
};

// Builds (or resumes) the cache. Throws InvalidArgumentError when an existing
// cache in out_dir was made with other settings or another target.
FeatureCacheReport build_feature_cache(const FeatureCacheOptions& options,
                                       const std::function<void(const std::string&)>& log);

// The read side: whole windows by index.
class FeatureCache {
 public:
  // Opens a finished cache and checks it against `target` (hidden size,
  // vocabulary, config fingerprint). Throws ModelLoadError naming the problem.
  static FeatureCache open(const std::filesystem::path& dir, const LlamaModel& target);

  std::int64_t windows() const { return windows_; }
  std::int64_t window() const { return window_; }
  std::int64_t hidden_size() const { return hidden_; }
  const std::string& matmul_dtype() const { return matmul_dtype_; }
  // The target layers whose outputs the cache holds (empty: none).
  const std::vector<std::int32_t>& layers() const { return layers_; }

  // tokens [n, len] int64 and hidden [n, len, hidden] float32: the first
  // `len` positions of the windows `indices`.
  std::pair<at::Tensor, at::Tensor> read(const std::vector<std::int64_t>& indices, std::int64_t len) const;
  // [n, len, layers().size() * hidden] float32: the cached layer outputs of
  // the same positions, side by side in the order of layers(). Throws
  // InvalidArgumentError when the cache holds no layers.
  at::Tensor read_layers(const std::vector<std::int64_t>& indices, std::int64_t len) const;

 private:
  std::filesystem::path dir_;
  std::int64_t windows_ = 0, window_ = 0, hidden_ = 0;
  std::string matmul_dtype_;
  std::vector<std::int32_t> layers_;
  mutable std::ifstream tokens_, hidden_file_, layers_file_;
};

// A fingerprint of a target's config.json and weights (size and FNV-1a of
// the safetensors bytes), so a cache is never read against another target.
std::string target_fingerprint(const std::filesystem::path& target_dir);

// The windows of a training run's steps: the run walks the cache in epochs,
// each visiting every window once in an order drawn from (seed, epoch). The
// windows of a step depend on (seed, step) alone, so a resumed run reads the
// batches an uninterrupted one would.
class EpochSampler {
 public:
  EpochSampler(std::uint64_t seed, std::int64_t windows);
  std::vector<std::int64_t> step(std::int64_t step, std::int64_t batch);

 private:
  std::uint64_t seed_;
  std::int64_t windows_;
  std::int64_t epoch_ = -1;
  std::vector<std::int64_t> order_;
};

}  // namespace specdec::torch_backend
