// Training of feature-level draft heads (`specdec train-lyanna`): distillation
// against the frozen target (Lyanna §4.1), run live or read from a feature
// cache (feature_cache.hpp),
//   L = alpha * MSE(h, H) + beta * CE(softmax(l'), softmax(L_target)),
// averaged over the N unrolled draft steps; Adam, linear warmup then linear
// decay (the paper decays linearly to 0), gradient clipping, checkpoints that
// a restarted run resumes from, a progress line, and held-out top-1 agreement
// with the target per draft step at the end.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "specdec/torch/draft_head.hpp"

namespace specdec::torch_backend {

struct HeadTrainOptions {
  std::filesystem::path train_tokens;    // flat little-endian uint16 token ids
  std::filesystem::path heldout_tokens;  // same format; accuracy at the end
  std::filesystem::path target_dir;      // the frozen target
  std::filesystem::path out_dir;         // head_config.json + head.safetensors; checkpoint/ while training
  std::filesystem::path features_dir;    // a `cache-features` cache: train on it instead of running the target
  at::ScalarType matmul_dtype = at::kFloat;  // f32, or bf16 operands with f32 accumulation (kernels::linear)
  HeadKind kind = HeadKind::kLyanna;
  bool first_token = true;
  std::int64_t token_info_rank = 64;
  std::int64_t hot_tokens = 2048;        // token info for the H most frequent training tokens; 0 = dense
  // EAGLE-3: the target layers step 1 fuses (empty = the default for the
  // target, DraftHeadConfig::default_feature_layers). A feature cache must
  // hold them (cache-features --layers).
  std::vector<std::int32_t> feature_layers;
  std::int64_t steps = 1000;
  std::int64_t batch_size = 8;
  std::int64_t seq_len = 256;            // anchors per window
  std::int64_t draft_steps = 3;          // N, the unrolled chain length
  double lr = 1e-3;
  double min_lr = 0.0;
  std::int64_t warmup_steps = 50;
  double alpha = 1.0, beta = 1.0;        // weights of the hidden-state MSE and the distribution CE
  double clip_norm = 1.0;
  std::int64_t checkpoint_every = 100;
  // Every this many steps (0 = never): held-out agreement of the head so far
  // (eval_windows windows), appended to <out>/curve.jsonl with the anchors
  // seen, and the head kept in <out>/snapshots/step-<n> (f16).
  std::int64_t snapshot_every = 0;
  std::int64_t eval_windows = 64;
  std::uint64_t seed = 1;
  std::string save_dtype = "f16";
  int threads = 0;
  std::int64_t max_steps_this_run = 0;   // stop early with a checkpoint; a later run resumes
  double time_budget_seconds = 0.0;
};

struct HeadTrainReport {
  std::int64_t steps_run = 0;
  std::int64_t resumed_from = 0;
  double final_loss = 0.0;               // mean of the last 50 steps
  double wall_seconds = 0.0;
  std::int64_t num_parameters = 0;       // trainable
  std::int64_t anchors = 0;              // anchors seen over the whole schedule so far (steps × batch × seq_len)
  bool finished = false;
  std::vector<double> top1;              // held-out, per draft step
  std::vector<double> chain_top1;        // held-out, steps 1..s all agree
  double hot_coverage = 1.0;             // share of training tokens that are hot
  std::int64_t table_bytes = 0, dense_table_bytes = 0;
};

// Learning rate at `step`: linear warmup to lr, then linear to min_lr.
double head_learning_rate(const HeadTrainOptions& o, std::int64_t step);

// Held-out top-1 agreement of `head` with `target`, per draft step (and the
// chained version), over up to `windows` consecutive windows.
void evaluate_draft_head(const DraftHead& head, const LlamaModel& target, const std::filesystem::path& tokens,
                         std::int64_t windows, std::int64_t seq_len, std::int64_t draft_steps,
                         std::vector<double>& top1, std::vector<double>& chain_top1);

HeadTrainReport train_draft_head(const HeadTrainOptions& options,
                                 const std::function<void(const std::string&)>& log);

}  // namespace specdec::torch_backend
