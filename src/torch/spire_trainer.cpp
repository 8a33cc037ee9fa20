#include "specdec/torch/spire_trainer.hpp"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "specdec/core/error.hpp"
#include "specdec/io/file_io.hpp"
#include "train_data.hpp"

namespace specdec::torch_backend {
using namespace train_data;

namespace {

void check_options(const SpireTrainOptions& o) {
  if (o.steps <= 0 || o.batch_size <= 0 || o.seq_len <= 0 || o.k <= 0 || o.checkpoint_every <= 0 ||
      o.warmup_steps < 0 || o.eval_windows <= 0)
    throw InvalidArgumentError(fmt::format(
        "train-spire: steps ({}), batch ({}), seq_len ({}), k ({}), checkpoint interval ({}), eval windows ({}) "
        "must be > 0 and warmup ({}) >= 0",
        o.steps, o.batch_size, o.seq_len, o.k, o.checkpoint_every, o.eval_windows, o.warmup_steps));
  if (o.seq_len % o.k != 0)
    throw InvalidArgumentError(fmt::format("train-spire: seq_len {} must be a multiple of k = {} (rollouts tile each "
                                           "window)",
                                           o.seq_len, o.k));
  if (!(o.lr > 0) || !(o.min_lr >= 0) || o.min_lr > o.lr)
    throw InvalidArgumentError(fmt::format("train-spire: need 0 <= min_lr ({}) <= lr ({}), lr > 0", o.min_lr, o.lr));
  if (!(o.omega >= 0 && o.omega <= 1))
    throw InvalidArgumentError(fmt::format("train-spire: omega {} must be in [0, 1]", o.omega));
  if (o.max_steps_this_run < 0 || o.time_budget_seconds < 0)
    throw InvalidArgumentError("train-spire: step and time limits must be >= 0 (0 = none)");
  parse_dtype(o.save_dtype);
  if (o.matmul_dtype != at::kFloat && o.matmul_dtype != at::kBFloat16)
    throw InvalidArgumentError("train-spire: the matmul precision must be f32 or bf16");
}

std::int64_t body_parameters(const LlamaModel& target) {
  std::int64_t n = 0;
  for (const auto& [name, t] : target.named_parameters())
    if (name.find(".layers.") != std::string::npos) n += t.numel();
  return n;
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

std::string percents(const std::vector<double>& v) {
  std::vector<std::string> s;
  for (const auto x : v) s.push_back(fmt::format("{:.1f}%", 100.0 * x));
  return fmt::format("{}", fmt::join(s, " / "));
}

}  // namespace

SpireEval evaluate_spire(const SpireDraft& draft, const LlamaModel& target, const std::filesystem::path& tokens_path,
                         std::int64_t windows_wanted, std::int64_t seq_len, std::int64_t k, at::ScalarType dt) {
  at::NoGradGuard no_grad;
  const auto tokens = read_tokens(tokens_path, target.vocab_size(), seq_len);
  const auto n = std::min(windows_wanted, static_cast<std::int64_t>(tokens.size()) / seq_len);
  SpireEval e;
  e.top1.assign(static_cast<std::size_t>(k), 0.0);
  e.acceptance.assign(static_cast<std::size_t>(k), 0.0);
  constexpr std::int64_t kBatch = 8;
  for (std::int64_t w = 0; w < n; w += kBatch) {
    std::vector<std::int64_t> starts;
    for (std::int64_t i = w; i < std::min(n, w + kBatch); ++i) starts.push_back(i * seq_len);
    const auto batch = windows(tokens, starts, seq_len);
    const auto [logits, memory] = draft.target_inputs(target, batch, dt);
    const auto out = draft.forward_train(batch, memory, logits, k, 1.0, true, dt);
    const double weight = static_cast<double>(starts.size()) / static_cast<double>(n);
    for (std::size_t j = 0; j < e.top1.size(); ++j) {
      e.top1[j] += out.top1[j] * weight;
      e.acceptance[j] += out.acceptance[j] * weight;
    }
  }
  double run = 1.0;
  for (const auto a : e.acceptance) e.tau += (run *= a);
  return e;
}

SpireTrainReport train_spire(const SpireTrainOptions& o, const std::function<void(const std::string&)>& log) {
  check_options(o);
  if (o.threads > 0) at::set_num_threads(o.threads);
  const auto start_time = std::chrono::steady_clock::now();
  const auto ckpt_dir = o.out_dir / "checkpoint";
  SpireTrainReport report;

  const train_data::RunLock lock(o.out_dir);  // one run per directory
  const LlamaModel target = LlamaModel::load(o.target_dir);
  const auto train = read_tokens(o.train_tokens, target.vocab_size(), o.seq_len);
  const bool resuming = !train_data::resume_checkpoint(o.out_dir).empty();
  SpireConfig config = o.draft;
  if (config.first_layer < 0) config.first_layer = target.config().num_hidden_layers - config.layers;
  SpireDraft draft = resuming ? SpireDraft::load(ckpt_dir, target) : SpireDraft::init(config, target, o.seed);
  draft.set_requires_grad(true);
  torch::optim::Adam optimizer(draft.parameters(), torch::optim::AdamOptions(o.lr));
  std::int64_t step = 0;
  if (resuming) {
    step = train_data::checkpoint_step(ckpt_dir);
    torch::load(optimizer, (ckpt_dir / "optimizer.pt").string());
    report.resumed_from = step;
    log(fmt::format("resuming from {} at step {}", ckpt_dir.string(), step));
  }
  report.num_parameters = draft.num_parameters();
  report.target_body_parameters = body_parameters(target);
  log(fmt::format("{}: {} trainable parameters ({:.2f} of the target's {} body parameters); k = {}, {}; data: {} "
                  "tokens; matmuls in {}",
                  draft.config().describe(), report.num_parameters,
                  static_cast<double>(report.num_parameters) / static_cast<double>(report.target_body_parameters),
                  report.target_body_parameters, o.k,
                  o.distill ? fmt::format("MixedLoss({})", o.omega) : std::string("hard cross-entropy"), train.size(),
                  o.matmul_dtype == at::kBFloat16 ? "bf16" : "f32"));

  std::vector<double> recent, recent_alpha;
  auto window_start = std::chrono::steady_clock::now();
  const std::int64_t first_step = step;
  const auto finish_report = [&](std::int64_t next_step) {
    report.steps_run = next_step - first_step;
    report.tokens = next_step * o.batch_size * o.seq_len;
    report.final_loss = mean(recent);
    report.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  };
  for (; step < o.steps; ++step) {
    const double lr = warmup_then_linear(o.lr, o.min_lr, o.warmup_steps, o.steps, step);
    for (auto& g : optimizer.param_groups()) static_cast<torch::optim::AdamOptions&>(g.options()).lr(lr);
    const auto batch = windows(train, batch_starts(o.seed, step, train.size(), o.batch_size, o.seq_len), o.seq_len);
    const auto [logits, memory] = draft.target_inputs(target, batch, o.matmul_dtype);
    optimizer.zero_grad();
    const auto out = draft.forward_train(batch, memory, logits, o.k, o.omega, o.distill, o.matmul_dtype);
    out.loss.backward();
    torch::nn::utils::clip_grad_norm_(draft.parameters(), o.clip_norm);
    optimizer.step();
    const double l = out.loss.item<double>();
    if (!std::isfinite(l)) throw Error(fmt::format("train-spire: loss became {} at step {}", l, step));
    recent.push_back(l);
    recent_alpha.push_back(out.alpha.item<double>());
    if (recent.size() > 50) {
      recent.erase(recent.begin());
      recent_alpha.erase(recent_alpha.begin());
    }
    if ((step + 1) % 10 == 0 || step + 1 == o.steps) {
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - window_start;
      const double steps_per_s = static_cast<double>(std::min<std::int64_t>(10, step + 1 - first_step)) / dt.count();
      const int filled = static_cast<int>(30 * (step + 1) / o.steps);
      log(fmt::format("[{}{}] step {}/{} | loss {:.3f} (ce {:.3f}) | alpha {:.3f} | top-1 by depth {} | lr {:.2e} | "
                      "{:.0f} tok/s | ETA {}",
                      std::string(filled, '#'), std::string(30 - filled, ' '), step + 1, o.steps, mean(recent),
                      out.ce.item<double>(), mean(recent_alpha), percents(out.top1), lr,
                      steps_per_s * static_cast<double>(o.batch_size * o.seq_len),
                      duration(static_cast<double>(o.steps - step - 1) / steps_per_s)));
      window_start = std::chrono::steady_clock::now();
    }
    if ((step + 1) % o.checkpoint_every == 0 && step + 1 < o.steps)
      save_checkpoint(o.out_dir, draft, optimizer, step + 1, o.seed);
    const std::chrono::duration<double> ran = std::chrono::steady_clock::now() - start_time;
    if (const char* why = early_stop_reason(step, first_step, o.steps, o.max_steps_this_run, o.time_budget_seconds,
                                            ran.count())) {
      save_checkpoint(o.out_dir, draft, optimizer, step + 1, o.seed);
      finish_report(step + 1);
      log(fmt::format("stopped at step {} of {} ({}); checkpoint in {}", step + 1, o.steps, why, ckpt_dir.string()));
      return report;
    }
  }
  report.finished = true;
  finish_report(step);
  draft.set_requires_grad(false);
  report.heldout = evaluate_spire(draft, target, o.heldout_tokens, o.eval_windows, o.seq_len, o.k, o.matmul_dtype);
  log(fmt::format("held-out, by depth 1..{}: top-1 agreement {}, expected acceptance {}; tau {:.3f}", o.k,
                  percents(report.heldout.top1), percents(report.heldout.acceptance), report.heldout.tau));
  draft.save(o.out_dir, parse_dtype(o.save_dtype));
  io::write_text_atomically(o.out_dir / "train_report.json",
                            nlohmann::json{{"draft", draft.config().describe()},
                                           {"parameters", report.num_parameters},
                                           {"target_body_parameters", report.target_body_parameters},
                                           {"steps", o.steps},
                                           {"batch", o.batch_size},
                                           {"seq_len", o.seq_len},
                                           {"k", o.k},
                                           {"omega", o.omega},
                                           {"distill", o.distill},
                                           {"tokens", report.tokens},
                                           {"lr", o.lr},
                                           {"matmul_dtype", o.matmul_dtype == at::kBFloat16 ? "bf16" : "f32"},
                                           {"final_loss", report.final_loss},
                                           {"heldout_top1", report.heldout.top1},
                                           {"heldout_acceptance", report.heldout.acceptance},
                                           {"heldout_tau", report.heldout.tau}}
                                    .dump(2) +
                                "\n");
  std::filesystem::remove_all(ckpt_dir);
  report.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  log(fmt::format("saved {} ({}) in {}", o.out_dir.string(), o.save_dtype, duration(report.wall_seconds)));
  return report;
}

}  // namespace specdec::torch_backend
