// `specdec train` / `specdec distill`: train a Llama-architecture language
// model on a token file (scripts/corpus/encode_corpus.py makes one), or
// distill a draft model from a target's soft distribution. Both resume from
// <out>/checkpoint when a previous run was interrupted.
#include "train.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/io/llama_config.hpp"

namespace specdec::cli {

void add_train_options(CLI::App& cmd, TrainCommand& t) {
  auto& o = t.options;
  cmd.add_option("--train", o.train_tokens, "training tokens (uint16 file)")->required()->check(CLI::ExistingFile);
  cmd.add_option("--heldout", o.heldout_tokens, "held-out tokens (uint16 file)")->required()->check(CLI::ExistingFile);
  cmd.add_option("--out", o.out_dir, "output model directory (config.json + model.safetensors)")->required();
  cmd.add_option("--preset", t.preset, "architecture preset: target or draft");
  cmd.add_option("--config", t.config_path, "architecture from a config.json instead of a preset")
      ->check(CLI::ExistingFile);
  cmd.add_option("--vocab", t.vocab, "vocabulary size for a preset");
  cmd.add_option("--steps", o.steps, "optimizer steps in total");
  cmd.add_option("--batch", o.batch_size, "sequences per step");
  cmd.add_option("--seq-len", o.seq_len, "tokens per sequence");
  cmd.add_option("--lr", o.lr, "peak learning rate");
  cmd.add_option("--min-lr", o.min_lr, "final learning rate of the cosine schedule");
  cmd.add_option("--warmup", o.warmup_steps, "linear warmup steps");
  cmd.add_option("--weight-decay", o.weight_decay, "AdamW weight decay (not on norm gains)");
  cmd.add_option("--clip", o.clip_norm, "gradient-norm clip");
  cmd.add_option("--checkpoint-every", o.checkpoint_every, "steps between checkpoints");
  cmd.add_option("--eval-windows", o.eval_windows, "held-out windows for the final perplexity");
  cmd.add_option("--seed", o.seed, "seed of the initialisation and of the batches");
  cmd.add_option("--save-dtype", o.save_dtype, "dtype of the saved weights: f32, f16, bf16");
  cmd.add_option("--threads", o.threads, "CPU threads (0 = all cores)");
  cmd.add_option("--max-steps-this-run", o.max_steps_this_run, "stop (with a checkpoint) after this many steps");
  cmd.add_option("--time-budget", o.time_budget_seconds, "stop (with a checkpoint) after this many seconds");
  cmd.add_option("--init-from", o.init_from, "warm start from this model directory when there is no checkpoint")
      ->check(CLI::ExistingDirectory);
  cmd.add_option("--start-step", o.start_step, "schedule step of a warm start");
}

void add_distill_options(CLI::App& cmd, TrainCommand& t) {
  add_train_options(cmd, t);
  cmd.add_option("--teacher", t.options.teacher_dir, "the target model to distill from")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd.add_option("--hard-weight", t.options.hard_loss_weight,
                 "weight of the hard next-token loss mixed into the soft loss (0..1)");
}

int run_train(TrainCommand& t) {
  t.options.model = t.config_path.empty() ? io::default_model_config(t.preset, t.vocab) : io::load_llama_config(t.config_path);
  const auto report = torch_backend::train_language_model(t.options, [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  });
  if (!report.finished) {
    std::printf("stopped after %lld steps; run the same command again to resume\n",
                static_cast<long long>(report.steps_run));
    return 0;
  }
  std::printf("trained %lld steps (resumed from step %lld), %lld parameters, final loss %.3f, held-out perplexity "
              "%.2f, wall %.0f s\n",
              static_cast<long long>(report.steps_run), static_cast<long long>(report.resumed_from),
              static_cast<long long>(report.num_parameters), report.final_loss, report.heldout_perplexity,
              report.wall_seconds);
  return 0;
}

}  // namespace specdec::cli
