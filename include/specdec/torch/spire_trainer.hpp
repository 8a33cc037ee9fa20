// Training of SPIRe draft models (`specdec train-spire`; Neelam et al., arXiv
// 2504.06419, §3): the frozen target runs on each batch of windows, the
// draft rolls out k tokens after every k-th prefix with the target's
// activations as its past memory (SpireDraft::forward_train), and minimises
// MixedLoss(omega). Adam with linear warmup and decay, gradient clipping,
// checkpoints a restarted run resumes from, and at the end the held-out
// top-1 agreement and expected acceptance per rollout depth.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "specdec/torch/spire_draft.hpp"

namespace specdec::torch_backend {

struct SpireTrainOptions {
  std::filesystem::path train_tokens;    // flat little-endian uint16 token ids
  std::filesystem::path heldout_tokens;  // same format; evaluation at the end
  std::filesystem::path target_dir;      // the frozen target
  std::filesystem::path out_dir;         // spire_config.json + model.safetensors; checkpoint/ while training
  at::ScalarType matmul_dtype = at::kFloat;
  // The draft: layers, sink, window and the ablation switches.
  // draft.first_layer < 0 takes the target's last layers.
  SpireConfig draft = [] {
    SpireConfig c;
    c.first_layer = -1;
    return c;
  }();
  std::int64_t k = 4;                    // rollout length (the maximum speculation depth)
  double omega = 0.5;                    // MixedLoss weight of the distillation term
  bool distill = true;                   // false: hard cross-entropy on the data (ablation)
  std::int64_t steps = 1000;
  std::int64_t batch_size = 8;
  std::int64_t seq_len = 256;            // positions per window, a multiple of k
  double lr = 5e-4;
  double min_lr = 5e-5;
  std::int64_t warmup_steps = 50;
  double clip_norm = 1.0;
  std::int64_t checkpoint_every = 100;
  std::int64_t eval_windows = 64;
  std::uint64_t seed = 1;
  std::string save_dtype = "f16";
  int threads = 0;
  std::int64_t max_steps_this_run = 0;   // stop early with a checkpoint; a later run resumes
  double time_budget_seconds = 0.0;
};

// Held-out quality per rollout depth 1 .. k: top-1 agreement with the target
// and the mean expected acceptance alpha_j = sum_i min(p_i, q_i) of a
// sampled draft token, and tau = 1 + sum_j prod_{i <= j} alpha_i, the
// tokens per round the alphas predict if acceptances were independent.
struct SpireEval {
  std::vector<double> top1, acceptance;
  double tau = 1.0;
};

struct SpireTrainReport {
  std::int64_t steps_run = 0, resumed_from = 0;
  double final_loss = 0.0;               // mean of the last 50 steps
  double wall_seconds = 0.0;
  std::int64_t num_parameters = 0;       // trainable
  std::int64_t target_body_parameters = 0;
  std::int64_t tokens = 0;               // positions trained on over the schedule so far
  bool finished = false;
  SpireEval heldout;
};

SpireEval evaluate_spire(const SpireDraft& draft, const LlamaModel& target, const std::filesystem::path& tokens,
                         std::int64_t windows, std::int64_t seq_len, std::int64_t k,
                         at::ScalarType matmul_dtype = at::kFloat);

SpireTrainReport train_spire(const SpireTrainOptions& options, const std::function<void(const std::string&)>& log);

}  // namespace specdec::torch_backend
