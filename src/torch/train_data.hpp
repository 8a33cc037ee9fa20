// Helpers shared by the trainers of src/torch (language models, draft heads):
// flat uint16 token files, training windows, the progress line's durations,
// the dtype names of saved weights. Internal to src/torch.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "specdec/core/error.hpp"
#include "specdec/core/tensor_view.hpp"
#include "specdec/io/file_io.hpp"
#include "specdec/io/token_file.hpp"

namespace specdec::torch_backend::train_data {

inline std::vector<std::uint16_t> read_tokens(const std::filesystem::path& path, std::int64_t vocab, std::int64_t min_len) {
  auto tokens = io::read_token_file(path);
  if (static_cast<std::int64_t>(tokens.size()) < min_len)
    throw ModelLoadError(fmt::format("{}: {} tokens, need at least {} for one window", path.string(), tokens.size(),
                                     min_len));
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] >= vocab)
      throw ModelLoadError(fmt::format("{}: token {} at position {} is outside the model vocabulary of {}",
                                       path.string(), tokens[i], i, vocab));
  return tokens;
}

// [rows, len] int64 windows starting at the given offsets.
inline at::Tensor windows(const std::vector<std::uint16_t>& tokens, const std::vector<std::int64_t>& starts, std::int64_t len) {
  auto out = at::empty({static_cast<std::int64_t>(starts.size()), len}, at::kLong);
  auto acc = out.accessor<std::int64_t, 2>();
  for (std::size_t r = 0; r < starts.size(); ++r)
    for (std::int64_t j = 0; j < len; ++j)
      acc[static_cast<std::int64_t>(r)][j] = tokens[static_cast<std::size_t>(starts[r] + j)];
  return out;
}

inline std::string duration(double seconds) {
  const auto s = static_cast<std::int64_t>(seconds);
  return s >= 3600 ? fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60) : fmt::format("{}m{:02}s", s / 60, s % 60);
}

inline DType parse_dtype(const std::string& s) {
  if (s == "f32") return DType::kF32;
  if (s == "f16") return DType::kF16;
  if (s == "bf16") return DType::kBF16;
  throw InvalidArgumentError(fmt::format("save dtype must be f32, f16 or bf16, got '{}'", s));
}

// Linear warmup to `lr` over `warmup` steps, then linear to `min_lr` at
// `steps`: the trainers' learning rate at 0-based `step`.
inline double warmup_then_linear(double lr, double min_lr, std::int64_t warmup, std::int64_t steps, std::int64_t step) {
  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const double span = static_cast<double>(std::max<std::int64_t>(1, steps - warmup));
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / span);
  return lr + (min_lr - lr) * progress;
}

// Start offsets of the `batch` windows of `window` tokens for step `step`: a
// pure function of (seed, step), so a resumed run sees the same batches an
// uninterrupted one would.
inline std::vector<std::int64_t> batch_starts(std::uint64_t seed, std::int64_t step, std::size_t num_tokens,
                                              std::int64_t batch, std::int64_t window) {
  std::mt19937_64 gen(seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(step));
  std::uniform_int_distribution<std::int64_t> pick(0, static_cast<std::int64_t>(num_tokens) - window);
  std::vector<std::int64_t> starts(static_cast<std::size_t>(batch));
  for (auto& s : starts) s = pick(gen);
  return starts;
}

// Whether a run stops early after 0-based `step` (a checkpoint, no final
// save): its step or time limit is reached before the last step. Returns the
// reason, or nullptr to go on.
inline const char* early_stop_reason(std::int64_t step, std::int64_t first_step, std::int64_t steps,
                                     std::int64_t max_steps_this_run, double time_budget_seconds, double ran_seconds) {
  if (step + 1 >= steps) return nullptr;
  if (max_steps_this_run > 0 && step + 1 - first_step >= max_steps_this_run) return "step limit";
  if (time_budget_seconds > 0 && ran_seconds >= time_budget_seconds) return "time budget";
  return nullptr;
}

// One run per output directory: an exclusive flock on <out_dir>/.lock for
// the run's life. Two runs on one directory would overwrite each other's
// checkpoints; the kernel drops the lock when its process dies (kill -9
// included), so a resume is never refused by a dead run. IoError naming the
// directory when another run holds it.
class RunLock {
 public:
  explicit RunLock(const std::filesystem::path& out_dir) : path_(out_dir / ".lock") {
    std::filesystem::create_directories(out_dir);
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw IoError(fmt::format("{}: cannot open: {}", path_.string(), std::strerror(errno)));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd_);
      if (err == EWOULDBLOCK)
        throw IoError(fmt::format("{}: another run is training into this directory (it holds {})",
                                  out_dir.string(), path_.string()));
      throw IoError(fmt::format("{}: cannot lock: {}", path_.string(), std::strerror(err)));
    }
  }
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock() {  // the file goes too: a finished run leaves no .lock among its outputs
    ::unlink(path_.c_str());
    ::close(fd_);
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// Writes <out_dir>/checkpoint: the weights (float32), the optimizer state and
// the next step. Everything goes to checkpoint.tmp first, state.json last and
// atomically (so a checkpoint with its state.json is complete); then the old
// checkpoint steps aside (checkpoint.old), the new one takes its name, and the
// old one goes. Wherever a crash or a kill -9 lands, resume_checkpoint finds
// a complete checkpoint: the new one or the old one.
template <class Weights, class Optimizer>
void save_checkpoint(const std::filesystem::path& out_dir, const Weights& weights, Optimizer& optimizer,
                     std::int64_t next_step, std::uint64_t seed) {
  const auto tmp = out_dir / "checkpoint.tmp", dir = out_dir / "checkpoint", old = out_dir / "checkpoint.old";
  std::filesystem::remove_all(tmp);
  weights.save(tmp, DType::kF32);
  torch::save(optimizer, (tmp / "optimizer.pt").string());
  const std::string state = fmt::format("{{\n  \"seed\": {},\n  \"step\": {}\n}}\n", seed, next_step);
  io::write_text_atomically(tmp / "state.json", state);
  std::filesystem::remove_all(old);
  if (std::filesystem::exists(dir)) std::filesystem::rename(dir, old);
  std::filesystem::rename(tmp, dir);
  std::filesystem::remove_all(old);
}

// The checkpoint a run resumes from: <out_dir>/checkpoint when it is complete
// (has its state.json); else the complete one a crash inside save_checkpoint
// left as checkpoint.tmp or checkpoint.old, moved back to checkpoint/ (the
// newer first). An empty path: nothing to resume, start afresh.
inline std::filesystem::path resume_checkpoint(const std::filesystem::path& out_dir) {
  const auto dir = out_dir / "checkpoint";
  if (std::filesystem::exists(dir / "state.json")) return dir;
  for (const char* left : {"checkpoint.tmp", "checkpoint.old"}) {
    const auto candidate = out_dir / left;
    if (!std::filesystem::exists(candidate / "state.json")) continue;
    std::filesystem::remove_all(dir);
    std::filesystem::rename(candidate, dir);
    return dir;
  }
  return {};
}

// The step a checkpoint's state.json says to resume at; ModelLoadError naming
// the file when it is not the JSON save_checkpoint writes.
inline std::int64_t checkpoint_step(const std::filesystem::path& checkpoint) {
  const auto path = checkpoint / "state.json";
  try {
    const auto state = nlohmann::json::parse(io::read_text_file(path));
    const auto& step = state.at("step");
    if (!step.is_number_integer() || step.get<std::int64_t>() < 0)
      throw ModelLoadError(fmt::format("{}: \"step\" is {}, not a step", path.string(), step.dump()));
    return step.get<std::int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw ModelLoadError(fmt::format("{}: not a checkpoint's state ({})", path.string(), e.what()));
  }
}

}  // namespace specdec::torch_backend::train_data
