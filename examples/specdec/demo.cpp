// `specdec demo`: every acceptance rule on a synthetic bigram language.
//
// The target is a bigram model with random logits; the draft is the target with
// Gaussian noise on its logits, so it agrees often but not always. Both are
// Models, and every method is the registry's (methods/standard_methods.hpp),
// run by the one round engine as on real models: chains and trees of the
// draft, each rule. Each method generates the same number of tokens; the
// table shows tokens per round (tau), acceptance and, as a losslessness
// check, the total-variation distance between the empirical next-token
// distributions and the (warped) target's. A lossless rule sits at
// autoregressive sampling's noise floor; a lossy one does not.
#include "demo.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "specdec/methods/standard_methods.hpp"
#include "specdec/specdec.hpp"

namespace specdec::cli {
namespace {

// A bigram language model as a Model: the logits after a token are its row,
// whatever came before, so it keeps no cache (only which sequences are open).
class BigramModel {
 public:
  BigramModel(std::int64_t vocab, std::vector<float> logits) : vocab_(vocab), logits_(std::move(logits)) {}
  std::int64_t vocab_size() const { return vocab_; }
  std::int64_t hidden_size() const { return 0; }
  std::int64_t max_context() const { return kUnboundedContext; }
  void open(std::int32_t seq, const CachePolicy& policy) {
    if (policy.kind != CachePolicy::Kind::kDense)
      throw UnsupportedError("BigramModel: only the dense cache policy (it keeps no cache)");
    if (std::find(open_.begin(), open_.end(), seq) == open_.end()) open_.push_back(seq);
  }
  void close(std::int32_t seq) { std::erase(open_, seq); }
  void forward(const ForwardRequest& request) {
    if (!request.hidden.empty()) throw UnsupportedError("BigramModel: no hidden states");
    auto* out = static_cast<float*>(request.logits.data());
    for (const auto& in : request.sequences) {
      if (std::find(open_.begin(), open_.end(), in.seq_id) == open_.end())
        throw InvalidArgumentError(fmt::format("BigramModel: sequence {} is not open", in.seq_id));
      for (const TokenId t : in.tokens) {
        if (t < 0 || t >= vocab_) throw InvalidArgumentError(fmt::format("BigramModel: token {} out of range", t));
        if (out == nullptr) continue;  // a prefill
        std::memcpy(out, logits_.data() + t * vocab_, static_cast<std::size_t>(vocab_) * sizeof(float));
        out += vocab_;
      }
    }
  }
  void accept(std::int32_t, std::span<const std::int32_t>) {}
  void rollback(std::int32_t, std::int64_t) {}

 private:
  std::int64_t vocab_;
  std::vector<float> logits_;  // [vocab, vocab]: row t is the logits after t
  std::vector<std::int32_t> open_;
};

// The warped target rows: P(. | prev) at the demo's sampling.
ProbMatrix warped_rows(std::int64_t vocab, const std::vector<float>& logits, const SamplingParams& params) {
  ProbMatrix probs(vocab, vocab);
  Warper warp;
  for (std::int64_t r = 0; r < vocab; ++r)
    warp(std::span<const float>(logits.data() + r * vocab, static_cast<std::size_t>(vocab)), params, probs.row(r));
  return probs;
}

// Every path of a full tree `width` wide and `depth` deep, as Medusa choices.
std::string full_tree_shape(std::int32_t width, std::int32_t depth) {
  std::vector<std::string> level{""}, next;
  std::string shape;
  for (std::int32_t d = 0; d < depth; ++d) {
    next.clear();
    for (const auto& path : level)
      for (std::int32_t c = 0; c < width; ++c) {
        next.push_back(path.empty() ? std::to_string(c) : path + "." + std::to_string(c));
        shape += (shape.empty() ? "" : ";") + next.back();
      }
    level.swap(next);
  }
  return shape;
}

struct Outcome {
  AcceptanceStats stats;
  std::vector<std::int64_t> pairs;  // pairs[prev * vocab + next]
  double us_per_round = 0;
};

Outcome run_method(AnyDecoder& method, std::int64_t vocab, const DemoOptions& o, const SamplingParams& params) {
  GenerationOptions g;
  g.max_new_tokens = o.tokens;
  g.sampling = params;
  const std::vector<TokenId> prompt{0};
  const auto start = std::chrono::steady_clock::now();
  const auto r = method.generate(prompt, g);
  const std::chrono::duration<double, std::micro> us = std::chrono::steady_clock::now() - start;
  Outcome out;
  out.stats = r.stats.acceptance;
  out.pairs.assign(static_cast<std::size_t>(vocab * vocab), 0);
  TokenId prev = prompt.back();
  for (const TokenId t : r.tokens) {
    ++out.pairs[static_cast<std::size_t>(prev * vocab + t)];
    prev = t;
  }
  out.us_per_round = us.count() / static_cast<double>(std::max<std::int64_t>(out.stats.num_rounds, 1));
  return out;
}

// Count-weighted mean over contexts of TV(empirical next-token distribution, target row).
double mean_tv(const Outcome& out, const ProbMatrix& target) {
  const auto v = target.vocab();
  double tv_sum = 0;
  std::int64_t total = 0;
  for (std::int64_t prev = 0; prev < v; ++prev) {
    std::int64_t n = 0;
    for (std::int64_t t = 0; t < v; ++t) n += out.pairs[static_cast<std::size_t>(prev * v + t)];
    if (n == 0) continue;
    const auto p = target.row(prev);
    double tv = 0;
    for (std::int64_t t = 0; t < v; ++t)
      tv += std::fabs(static_cast<double>(out.pairs[static_cast<std::size_t>(prev * v + t)]) / static_cast<double>(n) -
                      p[static_cast<std::size_t>(t)]);
    tv_sum += 0.5 * tv * static_cast<double>(n);
    total += n;
  }
  return tv_sum / static_cast<double>(total);
}

void print_row(const std::string& name, bool lossless, const Outcome& out, const ProbMatrix& target,
               std::int32_t gamma) {
  std::string depths;
  for (std::int32_t d = 1; d <= gamma; ++d)
    depths += fmt::format("{:5.2f}", out.stats.conditional_acceptance(static_cast<std::size_t>(d)));
  std::printf("%-44s %-9s %6.2f %7.3f %s   %8.5f %9.2f\n", name.c_str(), lossless ? "lossless" : "LOSSY",
              out.stats.mean_emitted(), out.stats.acceptance_rate(), depths.c_str(), mean_tv(out, target),
              out.us_per_round);
}

}  // namespace

void add_demo_options(CLI::App& cmd, DemoOptions& o) {
  cmd.add_option("--vocab", o.vocab, "vocabulary size of the synthetic bigram language")->check(CLI::Range(2, 4096));
  cmd.add_option("--gamma", o.gamma, "draft depth")->check(CLI::Range(1, 16));
  cmd.add_option("--width", o.width, "children per node for tree methods")->check(CLI::Range(1, 8));
  cmd.add_option("--tokens", o.tokens, "tokens each method generates")->check(CLI::Range(1, 100000000));
  cmd.add_option("--temperature", o.temperature, "sampling temperature (0 = greedy)");
  cmd.add_option("--top-k", o.top_k, "top-k (0 = off)");
  cmd.add_option("--top-p", o.top_p, "top-p (1 = off)");
  cmd.add_option("--draft-noise", o.draft_noise, "sd of the noise added to the draft's logits")
      ->check(CLI::Range(0.0, 100.0));
  cmd.add_option("--seed", o.seed, "seed of the synthetic models and of every rule");
}

int run_demo(const DemoOptions& o) {
  const SamplingParams params{o.temperature, o.top_k, o.top_p, o.seed};
  params.validate();
  if (std::pow(static_cast<double>(o.width), o.gamma) > 4096)
    throw InvalidArgumentError(fmt::format("demo: width^gamma = {}^{} nodes is too large (max 4096)", o.width, o.gamma));
  std::mt19937_64 gen(o.seed);
  std::normal_distribution<float> logit(0.0f, 2.0f), noise(0.0f, o.draft_noise);
  std::vector<float> target_logits(static_cast<std::size_t>(o.vocab * o.vocab)), draft_logits(target_logits.size());
  for (std::size_t i = 0; i < target_logits.size(); ++i) {
    target_logits[i] = logit(gen);
    draft_logits[i] = target_logits[i] + noise(gen);
  }
  const auto target_rows = warped_rows(o.vocab, target_logits, params);
  BigramModel target(o.vocab, std::move(target_logits)), draft(o.vocab, std::move(draft_logits));

  std::printf("specdec demo: bigram language, vocab %lld, draft depth %d, tree width %d, %lld tokens per method\n",
              static_cast<long long>(o.vocab), o.gamma, o.width, static_cast<long long>(o.tokens));
  std::printf("sampling: temperature %g, top_k %d, top_p %g, seed %llu; draft logit noise sd %g\n\n",
              static_cast<double>(o.temperature), o.top_k, static_cast<double>(o.top_p),
              static_cast<unsigned long long>(o.seed), static_cast<double>(o.draft_noise));
  std::string depth_header;
  for (std::int32_t d = 1; d <= o.gamma; ++d) depth_header += fmt::format("   d{}", d);
  std::printf("%-44s %-9s %6s %7s %s   %8s %9s\n", "method", "output", "tau", "accept", depth_header.c_str(),
              "TV", "us/round");

  // Chains of the draft: top-1 for greedy decoding, drawn otherwise. Trees:
  // the draft's top `width` children per node, or `width` drawn i.i.d.
  const auto registry = standard_methods<BigramModel>();
  const auto chain = fmt::format("chain:k={}", o.gamma);
  const auto tree = fmt::format("tree:shape={}", full_tree_shape(o.width, o.gamma));
  struct Row {
    std::string name, spec;
  };
  std::vector<Row> rows{{"autoregressive (noise floor)", "autoregressive"}};
  if (params.is_greedy()) {
    rows.push_back({"greedy, chain", chain + ":rule=greedy"});
    rows.push_back({fmt::format("greedy, top-{} tree", o.width), tree + ":rule=greedy"});
  }
  rows.push_back({"speculative sampling, chain", chain + ":rule=speculative"});
  rows.push_back({"block verification, chain", chain + ":rule=block"});
  rows.push_back({fmt::format("recursive rejection, {} i.i.d. children", o.width), tree + ":draw=iid:rule=rrs"});
  rows.push_back({fmt::format("traversal verification, {} i.i.d. children", o.width), tree + ":draw=iid:rule=traversal"});
  rows.push_back({fmt::format("recursive rejection, top-{} tree", o.width), tree + ":rule=rrs"});
  rows.push_back({fmt::format("typical acceptance, top-{} tree", o.width), tree + ":rule=typical"});
  for (const auto& row : rows) {
    const auto config = registry.parse(row.spec);
    auto method = registry.make(config, target, &draft, params);
    const bool lossless = registry.describe_rule(config, params).find("LOSSY") == std::string::npos;
    print_row(row.name, lossless, run_method(method, o.vocab, o, params), target_rows, o.gamma);
  }
  std::printf("\nTV: count-weighted mean total-variation distance between the empirical next-token\n"
              "distribution and the target's, per context. Lossless rules match the autoregressive\n"
              "noise floor; typical acceptance (Medusa) trades that for longer accepted runs.\n");
  return 0;
}

}  // namespace specdec::cli
