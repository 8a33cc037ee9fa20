// Language-model training for specdec's own small models (`specdec train`):
// next-token cross-entropy on a flat token file, AdamW, linear warmup then
// cosine decay, gradient clipping, periodic checkpoints that a restarted run
// resumes from, a progress line with loss, tokens/s and ETA, and held-out
// perplexity at the end.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "specdec/io/llama_config.hpp"

namespace specdec::torch_backend {

struct TrainOptions {
  std::filesystem::path train_tokens;    // flat little-endian uint16 token ids
  std::filesystem::path heldout_tokens;  // same format; perplexity at the end
  std::filesystem::path out_dir;         // final model; checkpoint/ inside while training
  io::LlamaConfig model;                 // architecture of a fresh model
  std::int64_t steps = 1000;
  std::int64_t batch_size = 16;
  std::int64_t seq_len = 256;
  double lr = 6e-4;
  double min_lr = 6e-5;
  std::int64_t warmup_steps = 100;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95;
  double clip_norm = 1.0;
  std::int64_t checkpoint_every = 200;
  std::int64_t eval_windows = 200;  // held-out windows of seq_len for the final perplexity
  std::uint64_t seed = 1;
  std::string save_dtype = "f16";   // dtype of the final weights: f32, f16 or bf16
  int threads = 0;                  // 0: all cores
  // Stop early (checkpoint, no final save) after this many steps or seconds in
  // this invocation; 0 = no limit. A later run with the same out_dir resumes.
  std::int64_t max_steps_this_run = 0;
  double time_budget_seconds = 0.0;
  // Distillation (`specdec distill`): with a teacher, the loss is the soft
  // cross-entropy to the teacher's next-token distribution (equal to
  // KL(teacher || student) plus a constant), mixed with the hard next-token
  // loss by hard_loss_weight. A draft aligned to its target is what makes
  // speculation pay.
  std::filesystem::path teacher_dir;  // empty: plain language-model training
  // Warm start when out_dir has no checkpoint: weights from this model
  // directory (e.g. a committed snapshot), fresh optimizer moments, and the
  // schedule continuing at start_step.
  std::filesystem::path init_from;
  std::int64_t start_step = 0;
  double hard_loss_weight = 0.0;
};

struct TrainReport {
  std::int64_t steps_run = 0;       // in this invocation
  std::int64_t resumed_from = 0;    // step of the checkpoint resumed, 0 if fresh
  double final_loss = 0.0;          // mean training loss of the last 50 steps
  double heldout_perplexity = 0.0;
  double wall_seconds = 0.0;
  std::int64_t num_parameters = 0;
  bool finished = false;            // false: stopped early, checkpoint saved
};

// Learning rate at `step` (0-based): linear warmup to lr, then cosine to min_lr.
double learning_rate(const TrainOptions& o, std::int64_t step);

// Trains (or resumes from out_dir/checkpoint), then saves the model to out_dir.
// With options.teacher_dir set it distills from that model instead.
// `log` receives progress lines.
TrainReport train_language_model(const TrainOptions& options,
                                 const std::function<void(const std::string&)>& log);

}  // namespace specdec::torch_backend
