#include "specdec/torch/trainer.hpp"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <numbers>
#include <optional>
#include <random>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "specdec/core/error.hpp"
#include "specdec/torch/llama_model.hpp"
#include "train_data.hpp"

namespace specdec::torch_backend {
using namespace train_data;
namespace {

at::Tensor next_token_loss(const LlamaModel& model, const at::Tensor& batch) {
  const auto t = batch.size(1) - 1;
  const auto logits = model.forward_train(batch.narrow(1, 0, t));
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), batch.narrow(1, 1, t).reshape({-1}));
}

// Soft cross-entropy to a frozen teacher, mixed with the hard loss.
at::Tensor distillation_loss(const LlamaModel& student, const LlamaModel& teacher, const at::Tensor& batch,
                             double hard_weight) {
  const auto t = batch.size(1) - 1;
  const auto inputs = batch.narrow(1, 0, t);
  at::Tensor teacher_probs;
  {
    at::NoGradGuard no_grad;
    teacher_probs = at::softmax(teacher.forward_train(inputs), -1);
  }
  const auto logits = student.forward_train(inputs);
  const auto soft = -(teacher_probs * at::log_softmax(logits, -1)).sum(-1).mean();
  if (hard_weight == 0.0) return soft;
  const auto hard =
      at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), batch.narrow(1, 1, t).reshape({-1}));
  return (1.0 - hard_weight) * soft + hard_weight * hard;
}

void check_options(const TrainOptions& o) {
  if (o.start_step < 0 || o.start_step >= o.steps)
    throw InvalidArgumentError(fmt::format("train: start_step {} must be in [0, steps = {})", o.start_step, o.steps));
  if (o.max_steps_this_run < 0 || o.time_budget_seconds < 0)
    throw InvalidArgumentError("train: step and time limits must be >= 0 (0 = none)");
  if (o.steps <= 0 || o.batch_size <= 0 || o.seq_len <= 1 || o.warmup_steps < 0 || o.checkpoint_every <= 0)
    throw InvalidArgumentError(fmt::format(
        "train: steps ({}), batch size ({}), checkpoint interval ({}) must be > 0, seq_len ({}) > 1, warmup ({}) >= 0",
        o.steps, o.batch_size, o.checkpoint_every, o.seq_len, o.warmup_steps));
  if (!(o.lr > 0) || !(o.min_lr >= 0) || o.min_lr > o.lr)
    throw InvalidArgumentError(fmt::format("train: need 0 <= min_lr ({}) <= lr ({}), lr > 0", o.min_lr, o.lr));
  if (o.seq_len > o.model.max_position_embeddings)
    throw InvalidArgumentError(fmt::format("train: seq_len {} exceeds the model's max_position_embeddings {}",
                                           o.seq_len, o.model.max_position_embeddings));
  parse_dtype(o.save_dtype);
  if (!(o.hard_loss_weight >= 0.0 && o.hard_loss_weight <= 1.0))
    throw InvalidArgumentError(fmt::format("distill: hard_loss_weight must be in [0, 1], got {}", o.hard_loss_weight));
}

}  // namespace

double learning_rate(const TrainOptions& o, std::int64_t step) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  const double span = static_cast<double>(std::max<std::int64_t>(1, o.steps - o.warmup_steps));
  const double progress = std::min(1.0, static_cast<double>(step - o.warmup_steps) / span);
  return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

TrainReport train_language_model(const TrainOptions& o, const std::function<void(const std::string&)>& log) {
  check_options(o);
  if (o.threads > 0) at::set_num_threads(o.threads);
  const auto start_time = std::chrono::steady_clock::now();
  const auto ckpt_dir = o.out_dir / "checkpoint";
  TrainReport report;

  // Fresh model, or resume: the checkpoint holds weights, optimizer moments and the step.
  const train_data::RunLock lock(o.out_dir);  // one run per directory
  const bool resuming = !train_data::resume_checkpoint(o.out_dir).empty();
  std::int64_t step = resuming || o.init_from.empty() ? 0 : o.start_step;
  LlamaModel model = resuming               ? LlamaModel::load(ckpt_dir)
                     : !o.init_from.empty() ? LlamaModel::load(o.init_from)
                                            : LlamaModel::random(o.model, o.seed);
  if (!resuming && !o.init_from.empty())
    log(fmt::format("warm start from {} at step {} (fresh optimizer state)", o.init_from.string(), step));
  model.set_requires_grad(true);
  std::vector<at::Tensor> decay, no_decay;  // no weight decay on norm gains
  for (const auto& [name, t] : model.named_parameters()) (t.dim() >= 2 ? decay : no_decay).push_back(t);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).weight_decay(o.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).weight_decay(0.0)));
  torch::optim::AdamW optimizer(std::move(groups));
  if (resuming) {
    step = train_data::checkpoint_step(ckpt_dir);
    torch::load(optimizer, (ckpt_dir / "optimizer.pt").string());
    report.resumed_from = step;
    log(fmt::format("resuming from {} at step {}", ckpt_dir.string(), step));
  }
  report.num_parameters = model.num_parameters();
  const auto& cfg = model.config();
  std::optional<LlamaModel> teacher;
  if (!o.teacher_dir.empty()) {
    teacher.emplace(LlamaModel::load(o.teacher_dir));
    if (teacher->vocab_size() != cfg.vocab_size)
      throw ShapeError(fmt::format("distill: teacher vocabulary {} differs from the student's {}",
                                   teacher->vocab_size(), cfg.vocab_size));
    log(fmt::format("distilling from {} ({} parameters)", o.teacher_dir.string(), teacher->num_parameters()));
  }
  const auto train = read_tokens(o.train_tokens, cfg.vocab_size, o.seq_len + 1);
  log(fmt::format("model: {} parameters ({} layers, hidden {}, {} heads / {} kv heads, vocab {}); data: {} tokens",
                  report.num_parameters, cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads,
                  cfg.num_key_value_heads, cfg.vocab_size, train.size()));


  std::vector<double> recent;
  auto window_start = std::chrono::steady_clock::now();
  std::int64_t window_tokens = 0;
  const std::int64_t first_step = step;
  for (; step < o.steps; ++step) {
    const double lr = learning_rate(o, step);
    for (auto& g : optimizer.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    const auto batch = windows(train, batch_starts(o.seed, step, train.size(), o.batch_size, o.seq_len + 1), o.seq_len + 1);
    optimizer.zero_grad();
    const auto loss = teacher ? distillation_loss(model, *teacher, batch, o.hard_loss_weight)
                              : next_token_loss(model, batch);
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model.parameters(), o.clip_norm);
    optimizer.step();
    const double l = loss.item<double>();
    if (!std::isfinite(l)) throw Error(fmt::format("train: loss became {} at step {}", l, step));
    recent.push_back(l);
    if (recent.size() > 50) recent.erase(recent.begin());
    window_tokens += o.batch_size * o.seq_len;
    if ((step + 1) % 10 == 0 || step + 1 == o.steps) {
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - window_start;
      const double tps = static_cast<double>(window_tokens) / dt.count();
      const double eta = static_cast<double>((o.steps - step - 1) * o.batch_size * o.seq_len) / tps;
      double mean = 0;
      for (double v : recent) mean += v;
      mean /= static_cast<double>(recent.size());
      const int filled = static_cast<int>(30 * (step + 1) / o.steps);
      log(fmt::format("[{}{}] step {}/{} | loss {:.3f} | lr {:.2e} | {:.0f} tok/s | ETA {}", std::string(filled, '#'),
                      std::string(30 - filled, ' '), step + 1, o.steps, mean, lr, tps, duration(eta)));
      window_start = std::chrono::steady_clock::now();
      window_tokens = 0;
    }
    if ((step + 1) % o.checkpoint_every == 0 && step + 1 < o.steps)
      save_checkpoint(o.out_dir, model, optimizer, step + 1, o.seed);
    const std::chrono::duration<double> ran = std::chrono::steady_clock::now() - start_time;
    if (const char* why = early_stop_reason(step, first_step, o.steps, o.max_steps_this_run, o.time_budget_seconds,
                                            ran.count())) {
      save_checkpoint(o.out_dir, model, optimizer, step + 1, o.seed);
      report.steps_run = step + 1 - first_step;
      for (double v : recent) report.final_loss += v / static_cast<double>(recent.size());
      report.wall_seconds = ran.count();
      log(fmt::format("stopped at step {} of {} ({}); checkpoint in {}", step + 1, o.steps,
                      why, ckpt_dir.string()));
      return report;
    }
  }
  report.finished = true;
  report.steps_run = step - first_step;
  for (double v : recent) report.final_loss += v / static_cast<double>(recent.size());

  // Held-out perplexity over consecutive windows.
  {
    at::NoGradGuard no_grad;
    const auto heldout = read_tokens(o.heldout_tokens, cfg.vocab_size, o.seq_len + 1);
    const auto max_windows = static_cast<std::int64_t>(heldout.size()) / (o.seq_len + 1);
    const auto n = std::min(o.eval_windows, max_windows);
    double total = 0;
    for (std::int64_t w = 0; w < n; w += o.batch_size) {
      std::vector<std::int64_t> starts;
      for (std::int64_t k = w; k < std::min(n, w + o.batch_size); ++k) starts.push_back(k * (o.seq_len + 1));
      total += next_token_loss(model, windows(heldout, starts, o.seq_len + 1)).item<double>() *
               static_cast<double>(starts.size());
    }
    report.heldout_perplexity = std::exp(total / static_cast<double>(n));
    log(fmt::format("held-out perplexity {:.2f} over {} windows of {} tokens", report.heldout_perplexity, n,
                    o.seq_len));
  }
  model.set_requires_grad(false);
  model.save(o.out_dir, parse_dtype(o.save_dtype));
  std::filesystem::remove_all(ckpt_dir);
  const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - start_time;
  report.wall_seconds = wall.count();
  log(fmt::format("saved {} ({}) in {}", o.out_dir.string(), o.save_dtype, duration(report.wall_seconds)));
  return report;
}

}  // namespace specdec::torch_backend
