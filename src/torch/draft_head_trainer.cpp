#include "specdec/torch/draft_head_trainer.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "kernels.hpp"
#include "specdec/core/error.hpp"
#include "specdec/draft/token_info_table.hpp"
#include "specdec/io/file_io.hpp"
#include "specdec/torch/feature_cache.hpp"
#include "train_data.hpp"

namespace specdec::torch_backend {
using namespace train_data;

namespace {

void check_options(const HeadTrainOptions& o) {
  if (o.steps <= 0 || o.batch_size <= 0 || o.seq_len <= 0 || o.draft_steps <= 0 || o.checkpoint_every <= 0 ||
      o.warmup_steps < 0 || o.eval_windows <= 0)
    throw InvalidArgumentError(fmt::format(
        "train-lyanna: steps ({}), batch ({}), seq_len ({}), draft steps ({}), checkpoint interval ({}), eval "
        "windows ({}) must be > 0 and warmup ({}) >= 0",
        o.steps, o.batch_size, o.seq_len, o.draft_steps, o.checkpoint_every, o.eval_windows, o.warmup_steps));
  if (!(o.lr > 0) || !(o.min_lr >= 0) || o.min_lr > o.lr)
    throw InvalidArgumentError(fmt::format("train-lyanna: need 0 <= min_lr ({}) <= lr ({}), lr > 0", o.min_lr, o.lr));
  if (!(o.alpha >= 0) || !(o.beta >= 0) || o.alpha + o.beta == 0)
    throw InvalidArgumentError(fmt::format("train-lyanna: loss weights alpha ({}) and beta ({}) must be >= 0, not both 0",
                                           o.alpha, o.beta));
  if (o.token_info_rank < 0 || o.hot_tokens < 0)
    throw InvalidArgumentError("train-lyanna: token-info rank and hot-token count must be >= 0");
  if (o.kind != HeadKind::kLyanna && (!o.first_token || o.token_info_rank != 0))
    throw InvalidArgumentError(
        "train-lyanna: EAGLE heads have no token info (--rank 0) and always fuse tokens");
  if (o.kind != HeadKind::kEagle3 && !o.feature_layers.empty())
    throw InvalidArgumentError("train-lyanna: only an EAGLE-3 head reads target layers (--layers)");
  if (o.snapshot_every < 0) throw InvalidArgumentError("train-lyanna: the snapshot interval must be >= 0 (0 = none)");
  if (o.max_steps_this_run < 0 || o.time_budget_seconds < 0)
    throw InvalidArgumentError("train-lyanna: step and time limits must be >= 0 (0 = none)");
  parse_dtype(o.save_dtype);
  if (o.matmul_dtype != at::kFloat && o.matmul_dtype != at::kBFloat16)
    throw InvalidArgumentError("train-lyanna: the matmul precision must be f32 or bf16");
}

// The frozen target's hidden states (after the final norm), logits and, for
// an EAGLE-3 head, the outputs of its feature layers, for a batch of windows.
struct TargetOutputs {
  at::Tensor hidden, logits, layers;
};

TargetOutputs target_outputs(const LlamaModel& target, const DraftHead& head, const at::Tensor& batch,
                             at::ScalarType matmul_dtype = at::kFloat) {
  at::NoGradGuard no_grad;
  TargetOutputs out;
  std::vector<at::Tensor> layers;
  const bool want_layers = !head.config().feature_layers.empty();
  out.logits = target.forward_train(batch, &out.hidden, matmul_dtype, want_layers ? &layers : nullptr);
  if (want_layers) out.layers = head.pick_layers(layers);
  return out;
}

// The head's feature layers out of a cache's: [n, len, L * d] of the
// cache's [n, len, Lc * d].
at::Tensor cached_layers(const FeatureCache& cache, const DraftHead& head,
                         const std::vector<std::int64_t>& picked, std::int64_t len) {
  const auto all = cache.read_layers(picked, len);
  const auto& have = cache.layers();
  const auto d = cache.hidden_size();
  std::vector<std::int64_t> columns;
  for (const auto l : head.config().feature_layers)
    columns.push_back(std::find(have.begin(), have.end(), l) - have.begin());
  const auto per_layer = all.view({all.size(0), len, static_cast<std::int64_t>(have.size()), d});
  return per_layer.index_select(2, at::tensor(columns, at::kLong)).reshape({all.size(0), len, -1});
}

const char* matmul_dtype_name(at::ScalarType t) { return t == at::kBFloat16 ? "bf16" : "f32"; }

}  // namespace

double head_learning_rate(const HeadTrainOptions& o, std::int64_t step) {
  return warmup_then_linear(o.lr, o.min_lr, o.warmup_steps, o.steps, step);
}

void evaluate_draft_head(const DraftHead& head, const LlamaModel& target, const std::filesystem::path& tokens_path,
                         std::int64_t windows_wanted, std::int64_t seq_len, std::int64_t draft_steps,
                         std::vector<double>& top1, std::vector<double>& chain_top1) {
  at::NoGradGuard no_grad;
  const auto window = seq_len + draft_steps;
  const auto tokens = read_tokens(tokens_path, target.vocab_size(), window);
  const auto n = std::min(windows_wanted, static_cast<std::int64_t>(tokens.size()) / window);
  top1.assign(static_cast<std::size_t>(draft_steps), 0.0);
  chain_top1.assign(static_cast<std::size_t>(draft_steps), 0.0);
  constexpr std::int64_t kBatch = 8;
  for (std::int64_t w = 0; w < n; w += kBatch) {
    std::vector<std::int64_t> starts;
    for (std::int64_t k = w; k < std::min(n, w + kBatch); ++k) starts.push_back(k * window);
    const auto batch = windows(tokens, starts, window);
    const auto t = target_outputs(target, head, batch);
    const auto out =
        head.forward_train(batch, t.hidden, t.logits, draft_steps, 1.0, 1.0, at::kFloat, t.layers);
    const double weight = static_cast<double>(starts.size()) / static_cast<double>(n);
    for (std::size_t s = 0; s < top1.size(); ++s) {
      top1[s] += out.top1[s] * weight;
      chain_top1[s] += out.chain_top1[s] * weight;
    }
  }
}

HeadTrainReport train_draft_head(const HeadTrainOptions& o, const std::function<void(const std::string&)>& log) {
  check_options(o);
  if (o.threads > 0) at::set_num_threads(o.threads);
  const auto start_time = std::chrono::steady_clock::now();
  const auto ckpt_dir = o.out_dir / "checkpoint";
  HeadTrainReport report;

  const LlamaModel target = LlamaModel::load(o.target_dir);
  const auto vocab = target.vocab_size();
  const auto train = read_tokens(o.train_tokens, vocab, o.seq_len + o.draft_steps);
  const auto counts = count_tokens(train, vocab);
  const train_data::RunLock lock(o.out_dir);  // one run per directory
  const bool resuming = !train_data::resume_checkpoint(o.out_dir).empty();
  DraftHeadConfig config;
  config.kind = o.kind;
  config.first_token = o.first_token;
  config.token_info_rank = o.kind == HeadKind::kLyanna ? o.token_info_rank : 0;
  if (o.kind == HeadKind::kEagle3)
    config.feature_layers = o.feature_layers.empty()
                                ? DraftHeadConfig::default_feature_layers(target.config().num_hidden_layers)
                                : o.feature_layers;
  if (config.has_token_info() && o.hot_tokens > 0 && o.hot_tokens < vocab)
    config.hot_tokens = most_frequent_tokens(counts, o.hot_tokens);
  DraftHead head = resuming ? DraftHead::load(ckpt_dir, target) : DraftHead::random(config, target, o.seed);
  if (head.config().has_token_info() && !head.config().hot_tokens.empty()) {
    std::int64_t hot = 0;
    for (const auto t : head.config().hot_tokens) hot += counts[static_cast<std::size_t>(t)];
    report.hot_coverage = static_cast<double>(hot) / static_cast<double>(train.size());
  }
  report.table_bytes = head.token_info().memory_bytes();
  report.dense_table_bytes = head.config().has_token_info() ? vocab * vocab * 4 : 0;
  head.set_requires_grad(true);
  torch::optim::Adam optimizer(head.parameters(), torch::optim::AdamOptions(o.lr));
  std::int64_t step = 0;
  if (resuming) {
    step = train_data::checkpoint_step(ckpt_dir);
    torch::load(optimizer, (ckpt_dir / "optimizer.pt").string());
    report.resumed_from = step;
    log(fmt::format("resuming from {} at step {}", ckpt_dir.string(), step));
  }
  report.num_parameters = head.num_parameters();
  log(fmt::format("{}: {} trainable parameters; target {} ({} parameters, frozen); data: {} tokens; matmuls in {}",
                  head.config().describe(), report.num_parameters, o.target_dir.string(), target.num_parameters(),
                  train.size(), matmul_dtype_name(o.matmul_dtype)));
  std::optional<FeatureCache> cache;
  std::optional<EpochSampler> sampler;
  if (!o.features_dir.empty()) {
    cache.emplace(FeatureCache::open(o.features_dir, target));
    if (cache->window() < o.seq_len + o.draft_steps)
      throw InvalidArgumentError(fmt::format("train-lyanna: the feature cache's windows hold {} tokens, {} + {} needed",
                                             cache->window(), o.seq_len, o.draft_steps));
    for (const auto l : head.config().feature_layers)
      if (std::find(cache->layers().begin(), cache->layers().end(), l) == cache->layers().end())
        throw InvalidArgumentError(
            fmt::format("train-lyanna: the head fuses target layer {}, which {} does not hold "
                        "(cache-features --layers {})",
                        l, o.features_dir.string(), fmt::join(head.config().feature_layers, ",")));
    sampler.emplace(o.seed, cache->windows());
    log(fmt::format("features: {} ({} windows, {} anchors; the target's matmuls were in {}); {:.2f} epochs in this "
                    "schedule",
                    o.features_dir.string(), cache->windows(), cache->windows() * o.seq_len, cache->matmul_dtype(),
                    static_cast<double>(o.steps * o.batch_size) / static_cast<double>(cache->windows())));
  }
  if (head.config().has_token_info())
    log(fmt::format("hot tokens cover {:.1f}% of the training tokens; token-info table {:.1f} MB (dense {:.1f} MB)",
                    100.0 * report.hot_coverage, static_cast<double>(report.table_bytes) / 1e6,
                    static_cast<double>(report.dense_table_bytes) / 1e6));


  const auto window = o.seq_len + o.draft_steps;
  std::vector<double> recent, recent_top1;
  auto window_start = std::chrono::steady_clock::now();
  const std::int64_t first_step = step;
  for (; step < o.steps; ++step) {
    const double lr = head_learning_rate(o, step);
    for (auto& g : optimizer.param_groups()) static_cast<torch::optim::AdamOptions&>(g.options()).lr(lr);
    at::Tensor batch;
    TargetOutputs t;
    if (cache) {
      const auto picked = sampler->step(step, o.batch_size);
      std::tie(batch, t.hidden) = cache->read(picked, window);
      if (!head.config().feature_layers.empty()) t.layers = cached_layers(*cache, head, picked, window);
      at::NoGradGuard no_grad;
      t.logits = kernels::linear(t.hidden, target.lm_head(), o.matmul_dtype);
    } else {
      batch = windows(train, batch_starts(o.seed, step, train.size(), o.batch_size, window), window);
      t = target_outputs(target, head, batch, o.matmul_dtype);
    }
    optimizer.zero_grad();
    const auto out = head.forward_train(batch, t.hidden, t.logits, o.draft_steps, o.alpha, o.beta,
                                        o.matmul_dtype, t.layers);
    out.loss.backward();
    torch::nn::utils::clip_grad_norm_(head.parameters(), o.clip_norm);
    optimizer.step();
    const double l = out.loss.item<double>();
    if (!std::isfinite(l)) throw Error(fmt::format("train-lyanna: loss became {} at step {}", l, step));
    recent.push_back(l);
    recent_top1.push_back(out.top1.front());
    if (recent.size() > 50) {
      recent.erase(recent.begin());
      recent_top1.erase(recent_top1.begin());
    }
    if ((step + 1) % 10 == 0 || step + 1 == o.steps) {
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - window_start;
      const double steps_per_s = static_cast<double>(std::min<std::int64_t>(10, step + 1 - first_step)) / dt.count();
      const double eta = static_cast<double>(o.steps - step - 1) / steps_per_s;
      const double mean = std::accumulate(recent.begin(), recent.end(), 0.0) / static_cast<double>(recent.size());
      const double acc =
          std::accumulate(recent_top1.begin(), recent_top1.end(), 0.0) / static_cast<double>(recent_top1.size());
      const int filled = static_cast<int>(30 * (step + 1) / o.steps);
      log(fmt::format("[{}{}] step {}/{} | loss {:.3f} (mse {:.3f}, ce {:.3f}) | top-1 step 1 {:.1f}% | lr {:.2e} | "
                      "{:.0f} tok/s | ETA {}",
                      std::string(filled, '#'), std::string(30 - filled, ' '), step + 1, o.steps, mean,
                      out.mse.item<double>(), out.ce.item<double>(), 100.0 * acc, lr,
                      steps_per_s * static_cast<double>(o.batch_size * o.seq_len), duration(eta)));
      window_start = std::chrono::steady_clock::now();
    }
    if (o.snapshot_every > 0 && (step + 1) % o.snapshot_every == 0) {
      // The curve of held-out agreement against anchors seen; the head as it is now.
      std::vector<double> top1, chain;
      evaluate_draft_head(head, target, o.heldout_tokens, o.eval_windows, o.seq_len, o.draft_steps, top1, chain);
      head.save(o.out_dir / "snapshots" / fmt::format("step-{}", step + 1), DType::kF16);
      io::append_text(o.out_dir / "curve.jsonl",
                      nlohmann::json{{"step", step + 1},
                                     {"anchors", (step + 1) * o.batch_size * o.seq_len},
                                     {"top1", top1},
                                     {"chain_top1", chain}}
                              .dump() +
                          "\n");
      log(fmt::format("step {}: held-out top-1 agreement {:.1f}% / {:.1f}% / {:.1f}% (steps 1..3)", step + 1,
                      100.0 * top1[0], top1.size() > 1 ? 100.0 * top1[1] : 0.0, top1.size() > 2 ? 100.0 * top1[2] : 0.0));
    }
    if ((step + 1) % o.checkpoint_every == 0 && step + 1 < o.steps)
      save_checkpoint(o.out_dir, head, optimizer, step + 1, o.seed);
    const std::chrono::duration<double> ran = std::chrono::steady_clock::now() - start_time;
    if (const char* why = early_stop_reason(step, first_step, o.steps, o.max_steps_this_run, o.time_budget_seconds,
                                            ran.count())) {
      save_checkpoint(o.out_dir, head, optimizer, step + 1, o.seed);
      report.steps_run = step + 1 - first_step;
      report.anchors = (step + 1) * o.batch_size * o.seq_len;
      report.final_loss = std::accumulate(recent.begin(), recent.end(), 0.0) / static_cast<double>(recent.size());
      report.wall_seconds = ran.count();
      log(fmt::format("stopped at step {} of {} ({}); checkpoint in {}", step + 1, o.steps,
                      why, ckpt_dir.string()));
      return report;
    }
  }
  report.finished = true;
  report.steps_run = step - first_step;
  report.anchors = step * o.batch_size * o.seq_len;
  if (!recent.empty())
    report.final_loss = std::accumulate(recent.begin(), recent.end(), 0.0) / static_cast<double>(recent.size());
  head.set_requires_grad(false);
  evaluate_draft_head(head, target, o.heldout_tokens, o.eval_windows, o.seq_len, o.draft_steps, report.top1,
                      report.chain_top1);
  std::string acc;
  for (std::size_t s = 0; s < report.top1.size(); ++s)
    acc += fmt::format("{}step {}: {:.1f}% (chain {:.1f}%)", s ? ", " : "", s + 1, 100.0 * report.top1[s],
                       100.0 * report.chain_top1[s]);
  log("held-out top-1 agreement with the target: " + acc);
  head.save(o.out_dir, parse_dtype(o.save_dtype));
  io::write_text_atomically(
      o.out_dir / "train_report.json",
      nlohmann::json{{"steps", o.steps},
                     {"batch", o.batch_size},
                     {"seq_len", o.seq_len},
                     {"anchors", report.anchors},
                     {"lr", o.lr},
                     {"matmul_dtype", matmul_dtype_name(o.matmul_dtype)},
                     {"alpha", o.alpha},
                     {"beta", o.beta},
                     {"features", o.features_dir.empty() ? "live target forward" : o.features_dir.string()},
                     {"top1", report.top1},
                     {"chain_top1", report.chain_top1},
                     {"final_loss", report.final_loss},
                     {"hot_coverage", report.hot_coverage},
                     {"table_bytes", report.table_bytes},
                     {"dense_table_bytes", report.dense_table_bytes}}
              .dump(2) +
          "\n");
  std::filesystem::remove_all(ckpt_dir);
  const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - start_time;
  report.wall_seconds = wall.count();
  log(fmt::format("saved {} ({}) in {}", o.out_dir.string(), o.save_dtype, duration(report.wall_seconds)));
  return report;
}

}  // namespace specdec::torch_backend
