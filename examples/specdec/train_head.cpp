// `specdec train-lyanna`: train a Lyanna draft head (or one of its ablations,
// or the EAGLE-style baseline) against a frozen target; resumes from
// <out>/checkpoint. `specdec cache-features`: the target's features on disk,
// for training heads without running the target. `specdec hot-tokens`: token frequencies of a corpus and
// the share the H most frequent tokens cover (Lyanna §6.1).
#include "train_head.hpp"

#include <ATen/Parallel.h>

#include <malloc.h>

#include <climits>
#include <cstdio>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/draft/token_info_table.hpp"
#include "specdec/io/token_file.hpp"
#include "specdec/io/token_frequencies.hpp"
#include "specdec/torch/inference_dtype.hpp"

namespace specdec::cli {

// --matmul-dtype auto | f32 | bf16 of the trainers: bf16 operands with f32
// accumulation where this CPU runs bf16 natively (auto), f32 otherwise.
at::ScalarType training_matmul_dtype(const std::string& requested) {
  const auto chosen = torch_backend::choose_inference_dtype(requested);
  if (!chosen.note.empty()) std::printf("note: %s\n", chosen.note.c_str());
  return chosen.dtype == DType::kBF16 ? at::kBFloat16 : at::kFloat;
}

// Each training step allocates and frees the same large activations (an
// [8, 256, 8000] logit tensor is 65 MB). glibc serves blocks that large with
// mmap and unmaps them at free, so every step faulted in and zeroed fresh
// pages: a third of the samples under perf. Keeping freed memory in the heap
// lets the next step reuse it (docs/RESULTS.md, head training).
void print_line(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void keep_freed_memory() {
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
}

void add_matmul_dtype_option(CLI::App& cmd, std::string& dtype) {
  cmd.add_option("--matmul-dtype", dtype,
                 "precision of the weight matmuls: auto (bf16 operands, f32 accumulation, where the CPU has a native "
                 "bf16 dot product; else f32), f32, bf16");
}

void add_train_head_options(CLI::App& cmd, TrainHeadCommand& t) {
  auto& o = t.options;
  cmd.add_option("--train", o.train_tokens, "training tokens (uint16 file)")->required()->check(CLI::ExistingFile);
  cmd.add_option("--heldout", o.heldout_tokens, "held-out tokens (uint16 file)")->required()->check(CLI::ExistingFile);
  cmd.add_option("--target", o.target_dir, "the frozen target model")->required()->check(CLI::ExistingDirectory);
  cmd.add_option("--out", o.out_dir, "output directory (head_config.json + head.safetensors)")->required();
  cmd.add_option("--features", o.features_dir,
                 "a `specdec cache-features` directory: read the target's features from it instead of running the "
                 "target")
      ->check(CLI::ExistingDirectory);
  add_matmul_dtype_option(cmd, t.matmul_dtype);
  cmd.add_option(
      "--variant", t.variant,
      "lyanna, no-token-info, no-first-token (the paper's ablations), eagle (the baseline head) or eagle3 "
      "(fused low/middle/high target layers, no feature loss)");
  cmd.add_option(
         "--layers", o.feature_layers,
         "eagle3: the target layers fused (0-based, comma-separated; default: the second, middle and last)")
      ->delimiter(',');
  cmd.add_option("--rank", o.token_info_rank, "rank of the token-info embedding W_E W_1 W_2");
  cmd.add_option("--hot", o.hot_tokens, "token info for the H most frequent training tokens (0 = dense)");
  cmd.add_option("--steps", o.steps, "optimizer steps in total");
  cmd.add_option("--batch", o.batch_size, "windows per step");
  cmd.add_option("--seq-len", o.seq_len, "anchor positions per window");
  cmd.add_option("--draft-steps", o.draft_steps, "unrolled draft steps N");
  cmd.add_option("--lr", o.lr, "peak learning rate (then linear decay)");
  cmd.add_option("--min-lr", o.min_lr, "final learning rate");
  cmd.add_option("--warmup", o.warmup_steps, "linear warmup steps");
  t.alpha_option = cmd.add_option("--alpha", o.alpha, "weight of the hidden-state MSE (eagle3: default 0)");
  cmd.add_option("--beta", o.beta, "weight of the cross-entropy to the target distribution");
  cmd.add_option("--clip", o.clip_norm, "gradient-norm clip");
  cmd.add_option("--checkpoint-every", o.checkpoint_every, "steps between checkpoints");
  cmd.add_option("--snapshot-every", o.snapshot_every,
                 "steps between held-out evaluations (curve.jsonl) and kept heads (snapshots/step-N); 0 = none");
  cmd.add_option("--eval-windows", o.eval_windows, "held-out windows for the final accuracy");
  cmd.add_option("--seed", o.seed, "seed of the initialisation and of the batches");
  cmd.add_option("--save-dtype", o.save_dtype, "dtype of the saved weights: f32, f16, bf16");
  cmd.add_option("--threads", o.threads, "CPU threads (0 = all cores)");
  cmd.add_option("--max-steps-this-run", o.max_steps_this_run, "stop (with a checkpoint) after this many steps");
  cmd.add_option("--time-budget", o.time_budget_seconds, "stop (with a checkpoint) after this many seconds");
}

int run_train_head(TrainHeadCommand& t) {
  auto& o = t.options;
  o.matmul_dtype = training_matmul_dtype(t.matmul_dtype);
  keep_freed_memory();
  if (t.variant == "lyanna") {
    o.kind = torch_backend::HeadKind::kLyanna;
  } else if (t.variant == "no-token-info") {
    o.kind = torch_backend::HeadKind::kLyanna;
    o.token_info_rank = 0;
  } else if (t.variant == "no-first-token") {
    o.kind = torch_backend::HeadKind::kLyanna;
    o.first_token = false;
  } else if (t.variant == "eagle") {
    o.kind = torch_backend::HeadKind::kEagle;
    o.token_info_rank = 0;
  } else if (t.variant == "eagle3") {
    // EAGLE-3 drops the feature-prediction loss (arXiv 2503.01840 §3.1).
    o.kind = torch_backend::HeadKind::kEagle3;
    o.token_info_rank = 0;
    if (t.alpha_option == nullptr || t.alpha_option->count() == 0) o.alpha = 0.0;
  } else {
    throw InvalidArgumentError(fmt::format(
        "train-lyanna: --variant must be lyanna, no-token-info, no-first-token, eagle or eagle3, got '{}'",
        t.variant));
  }
  const auto report = torch_backend::train_draft_head(o, print_line);
  if (!report.finished) {
    std::printf("stopped after %lld steps; run the same command again to resume\n",
                static_cast<long long>(report.steps_run));
    return 0;
  }
  std::printf("trained %lld steps (resumed from step %lld), %lld trainable parameters, final loss %.3f, wall %.0f s\n",
              static_cast<long long>(report.steps_run), static_cast<long long>(report.resumed_from),
              static_cast<long long>(report.num_parameters), report.final_loss, report.wall_seconds);
  return 0;
}

void add_cache_features_options(CLI::App& cmd, CacheFeaturesCommand& c) {
  auto& o = c.options;
  cmd.add_option("--tokens", o.tokens, "training tokens (uint16 file)")->required()->check(CLI::ExistingFile);
  cmd.add_option("--target", o.target_dir, "the frozen target model")->required()->check(CLI::ExistingDirectory);
  cmd.add_option("--out", o.out_dir, "cache directory (meta.json, tokens.u16, hidden.f16, layers.f16)")
      ->required();
  cmd.add_option("--windows", o.windows, "windows to cache (each the trainer's --seq-len + --draft-steps tokens)");
  cmd.add_option("--window", o.window, "tokens per window");
  cmd.add_option("--batch", o.batch, "windows per target forward");
  cmd.add_option("--seed", o.seed, "which of the token file's non-overlapping windows are cached");
  cmd.add_option("--layers", o.layers,
                 "also cache the outputs of these target layers (0-based, comma-separated), the features an "
                 "EAGLE-3 head fuses")
      ->delimiter(',');
  add_matmul_dtype_option(cmd, c.matmul_dtype);
  cmd.add_option("--threads", o.threads, "CPU threads (0 = all cores)");
  cmd.add_option("--time-budget", o.time_budget_seconds, "stop after this many seconds; the same command resumes");
}

int run_cache_features(CacheFeaturesCommand& c) {
  c.options.matmul_dtype = training_matmul_dtype(c.matmul_dtype);
  keep_freed_memory();
  const auto report = torch_backend::build_feature_cache(c.options, print_line);
  if (!report.finished) {
    std::printf("stopped at window %lld of %lld; run the same command again to resume\n",
                static_cast<long long>(report.windows_done), static_cast<long long>(report.windows_total));
    return 0;
  }
  std::printf("cached %lld windows (%lld resumed) in %.0f s\n", static_cast<long long>(report.windows_total),
              static_cast<long long>(report.resumed_from), report.wall_seconds);
  return 0;
}

void add_hot_tokens_options(CLI::App& cmd, HotTokensCommand& h) {
  cmd.add_option("--tokens", h.tokens, "corpus tokens (uint16 file)")->required()->check(CLI::ExistingFile);
  cmd.add_option("--vocab", h.vocab, "vocabulary size");
  cmd.add_option("--top", h.top, "how many hot tokens");
  cmd.add_option("--out", h.out, "write {counts, hot} as JSON here");
}

int run_hot_tokens(const HotTokensCommand& h) {
  const auto tokens = io::read_token_file(h.tokens);
  const auto counts = count_tokens(tokens, h.vocab);
  const auto hot = most_frequent_tokens(counts, h.top);
  std::int64_t covered = 0;
  for (const auto t : hot) covered += counts[static_cast<std::size_t>(t)];
  std::int64_t unused = 0;
  for (const auto c : counts) unused += c == 0;
  std::printf("%zu tokens, vocabulary %lld (%lld never seen); the %lld most frequent cover %.2f%%\n", tokens.size(),
              static_cast<long long>(h.vocab), static_cast<long long>(unused), static_cast<long long>(h.top),
              100.0 * static_cast<double>(covered) / static_cast<double>(tokens.size()));
  std::printf("token-info table: dense %.1f MB, hot %.1f MB (float32)\n",
              static_cast<double>(h.vocab * h.vocab * 4) / 1e6, static_cast<double>(h.top * h.top * 4) / 1e6);
  for (const std::int64_t k : {256, 512, 1024, 2048, 4096}) {
    if (k > h.vocab) break;
    std::int64_t c = 0;
    for (const auto t : most_frequent_tokens(counts, k)) c += counts[static_cast<std::size_t>(t)];
    std::printf("  top %5lld: %.2f%%\n", static_cast<long long>(k),
                100.0 * static_cast<double>(c) / static_cast<double>(tokens.size()));
  }
  if (!h.out.empty()) io::write_token_frequencies(h.out, counts, hot);
  return 0;
}

void add_eval_head_options(CLI::App& cmd, EvalHeadCommand& e) {
  cmd.add_option("--head", e.head, "draft head directory (head_config.json + head.safetensors)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd.add_option("--target", e.target, "the target model the head was trained on");
  cmd.add_option("--heldout", e.heldout, "held-out tokens (uint16 file)")->required()->check(CLI::ExistingFile);
  cmd.add_option("--windows", e.windows, "held-out windows");
  cmd.add_option("--seq-len", e.seq_len, "anchor positions per window");
  cmd.add_option("--draft-steps", e.draft_steps, "draft steps N");
  cmd.add_option("--threads", e.threads, "CPU threads (0 = all cores)");
}

int run_eval_head(const EvalHeadCommand& e) {
  if (e.threads > 0) at::set_num_threads(e.threads);
  const auto target = torch_backend::LlamaModel::load(e.target);
  const auto head = torch_backend::DraftHead::load(e.head, target);
  std::vector<double> top1, chain;
  torch_backend::evaluate_draft_head(head, target, e.heldout, e.windows, e.seq_len, e.draft_steps, top1, chain);
  std::printf("%s: %lld trainable parameters; token-info table %.1f MB (dense %.1f MB)\n",
              head.config().describe().c_str(), static_cast<long long>(head.num_parameters()),
              static_cast<double>(head.token_info().memory_bytes()) / 1e6,
              head.config().has_token_info() ? static_cast<double>(head.token_info().dense_memory_bytes()) / 1e6 : 0.0);
  std::printf("step | top-1 agreement with the target | all steps so far agree | conditional (step s given 1..s-1)\n");
  for (std::size_t s = 0; s < top1.size(); ++s)
    std::printf("%4zu | %6.2f%% | %6.2f%% | %6.2f%%\n", s + 1, 100.0 * top1[s], 100.0 * chain[s],
                100.0 * (s == 0 ? chain[0] : chain[s] / std::max(chain[s - 1], 1e-12)));
  return 0;
}

}  // namespace specdec::cli
