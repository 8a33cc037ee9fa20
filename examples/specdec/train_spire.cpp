// `specdec train-spire`: train a SPIRe draft model (arXiv 2504.06419, §3)
// against a frozen target, or one of the paper's Figure-5 ablations; resumes
// from <out>/checkpoint.
#include "train_spire.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "train_head.hpp"

namespace specdec::cli {

void add_train_spire_options(CLI::App& cmd, TrainSpireCommand& t) {
  auto& o = t.options;
  cmd.add_option("--train", o.train_tokens, "training tokens (uint16 file)")->required()->check(CLI::ExistingFile);
  cmd.add_option("--heldout", o.heldout_tokens, "held-out tokens (uint16 file)")->required()->check(CLI::ExistingFile);
  cmd.add_option("--target", o.target_dir, "the frozen target model")->required()->check(CLI::ExistingDirectory);
  cmd.add_option("--out", o.out_dir, "output directory (spire_config.json + model.safetensors)")->required();
  add_matmul_dtype_option(cmd, t.matmul_dtype);
  cmd.add_option("--layers", o.draft.layers, "draft layers (pruned from the target's last layers)");
  cmd.add_option("--sink", o.draft.sink, "attention-sink positions every step sees");
  cmd.add_option("--window", o.draft.window, "the sliding window: the last W positions a step sees");
  cmd.add_flag("--dense", t.dense, "ablation: no sink + window, every earlier position is seen");
  cmd.add_option("--memory", t.memory, "past memories: target (the target's activations) | embedding (ablation)");
  cmd.add_flag("--no-feedback", t.no_feedback, "ablation: a drafted token's memory is its layer input, not a mix");
  cmd.add_flag("--random-init", t.random_init, "ablation: random weights instead of the target's last layers");
  cmd.add_flag("--hard-loss", t.hard_loss, "ablation: cross-entropy on the data's next token, not distillation");
  cmd.add_option("--omega", o.omega, "MixedLoss weight of the distillation term (1 = distillation alone)");
  cmd.add_option("--k", o.k, "rollout length: tokens drafted per round");
  cmd.add_option("--steps", o.steps, "optimizer steps in total");
  cmd.add_option("--batch", o.batch_size, "windows per step");
  cmd.add_option("--seq-len", o.seq_len, "positions per window (a multiple of k)");
  cmd.add_option("--lr", o.lr, "peak learning rate (then linear decay)");
  cmd.add_option("--min-lr", o.min_lr, "final learning rate");
  cmd.add_option("--warmup", o.warmup_steps, "linear warmup steps");
  cmd.add_option("--clip", o.clip_norm, "gradient-norm clip");
  cmd.add_option("--checkpoint-every", o.checkpoint_every, "steps between checkpoints");
  cmd.add_option("--eval-windows", o.eval_windows, "held-out windows for the final evaluation");
  cmd.add_option("--seed", o.seed, "seed of the initialisation and of the batches");
  cmd.add_option("--save-dtype", o.save_dtype, "dtype of the saved weights: f32, f16, bf16");
  cmd.add_option("--threads", o.threads, "CPU threads (0 = all cores)");
  cmd.add_option("--max-steps-this-run", o.max_steps_this_run, "stop (with a checkpoint) after this many steps");
  cmd.add_option("--time-budget", o.time_budget_seconds, "stop (with a checkpoint) after this many seconds");
}

int run_train_spire(TrainSpireCommand& t) {
  auto& o = t.options;
  o.matmul_dtype = training_matmul_dtype(t.matmul_dtype);
  keep_freed_memory();
  if (t.memory != "target" && t.memory != "embedding")
    throw InvalidArgumentError(fmt::format("train-spire: --memory must be target or embedding, got '{}'", t.memory));
  o.draft.target_memory = t.memory == "target";
  if (t.dense) o.draft.window = 0;
  o.draft.feedback = !t.no_feedback;
  o.draft.pruned_init = !t.random_init;
  o.distill = !t.hard_loss;
  const auto report = torch_backend::train_spire(o, print_line);
  if (!report.finished) {
    std::printf("stopped after %lld steps; run the same command again to resume\n",
                static_cast<long long>(report.steps_run));
    return 0;
  }
  std::printf("trained %lld steps (resumed from step %lld), %lld trainable parameters, final loss %.3f, held-out tau "
              "%.3f, wall %.0f s\n",
              static_cast<long long>(report.steps_run), static_cast<long long>(report.resumed_from),
              static_cast<long long>(report.num_parameters), report.final_loss, report.heldout.tau,
              report.wall_seconds);
  return 0;
}

}  // namespace specdec::cli
