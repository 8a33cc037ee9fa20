// `specdec demo`: every acceptance rule on a synthetic bigram language.
//
// The target is a bigram model with random logits; the draft is the target with
// Gaussian noise on its logits, so it agrees often but not always. Each method
// generates the same number of tokens; the table shows tokens per round (tau),
// acceptance and, as a losslessness check, the total-variation distance between
// the empirical next-token distributions and the (warped) target's. A lossless
// rule sits at autoregressive sampling's noise floor; a lossy one does not.
#include "demo.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "specdec/specdec.hpp"

namespace specdec::cli {
namespace {

// Warped next-token distributions of a bigram model: row(prev) = P(. | prev).
class Bigram {
 public:
  Bigram(std::int64_t vocab, const std::vector<float>& logits, const SamplingParams& params)
      : vocab_(vocab), probs_(vocab, vocab) {
    Warper warp;
    for (std::int64_t r = 0; r < vocab; ++r)
      warp(std::span<const float>(logits.data() + r * vocab, static_cast<std::size_t>(vocab)), params,
           probs_.row(r));
  }
  std::span<const float> row(TokenId prev) const { return probs_.row(prev); }
  std::int64_t vocab() const { return vocab_; }

 private:
  std::int64_t vocab_;
  ProbMatrix probs_;
};

enum class Children { kChain, kSampled, kTopK };

struct Method {
  std::string name;
  Children children;
};

struct Outcome {
  AcceptanceStats stats;
  std::vector<std::int64_t> pairs;  // pairs[prev * vocab + next]
  double us_per_round = 0;
};

// Top-w tokens of a row (ties to the lower id).
std::vector<TokenId> top_tokens(std::span<const float> row, std::int32_t w) {
  std::vector<TokenId> ids(row.size());
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<TokenId>(i);
  const auto n = std::min<std::size_t>(static_cast<std::size_t>(w), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
                    [&](TokenId a, TokenId b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  ids.resize(n);
  std::erase_if(ids, [&](TokenId t) { return !(row[t] > 0.0f); });
  return ids;
}

// Drafts a tree of the given depth: a chain, or `width` children per node
// (i.i.d. samples or the draft's top-`width`), recording each slot's draft row.
void draft_tree(const Bigram& draft, const DemoOptions& o, Children kind, TokenId root, RandomStream& rng,
                DraftTree& tree, ProbMatrix& rows) {
  tree.clear(root);
  rows.resize(0, draft.vocab());
  std::vector<std::int32_t> frontier{DraftTree::kRoot}, next;
  for (std::int32_t depth = 0; depth < o.gamma; ++depth) {
    next.clear();
    for (const auto slot : frontier) {
      const TokenId ctx = slot == DraftTree::kRoot ? root : tree.token(slot);
      const auto q = draft.row(ctx);
      auto row = rows.append_row();
      std::copy(q.begin(), q.end(), row.begin());
      const auto row_index = static_cast<std::int32_t>(rows.num_rows() - 1);
      if (kind == Children::kTopK) {
        tree.set_children_source(slot, row_index, ChildMode::kDeterministic);
        for (const TokenId t : top_tokens(q, o.width)) next.push_back(tree.add_node(slot, t, q[t]));
      } else {
        const auto n = kind == Children::kChain ? 1 : o.width;
        tree.set_children_source(slot, row_index, ChildMode::kSampledWithReplacement);
        for (std::int32_t c = 0; c < n; ++c) {
          const TokenId t = row_math::sample_row(q.data(), draft.vocab(), rng.uniform());
          next.push_back(tree.add_node(slot, t, q[t]));
        }
      }
    }
    frontier.swap(next);
  }
}

template <class Rule>
Outcome run_method(Rule& rule, const Method& m, const Bigram& target, const Bigram& draft,
                   const DemoOptions& o) {
  Outcome out;
  const auto v = target.vocab();
  out.pairs.assign(static_cast<std::size_t>(v * v), 0);
  RandomStream draft_rng(o.seed, 1), verify_rng(o.seed, 2);
  DraftTree tree;
  ProbMatrix draft_rows, target_rows;
  VerifyResult result;
  TokenId prev = 0;
  std::int64_t produced = 0;
  const auto start = std::chrono::steady_clock::now();
  while (produced < o.tokens) {
    draft_tree(draft, o, m.children, prev, draft_rng, tree, draft_rows);
    target_rows.resize(tree.size() + 1, v);
    for (std::int32_t s = DraftTree::kRoot; s < tree.size(); ++s) {
      const auto p = target.row(s == DraftTree::kRoot ? prev : tree.token(s));
      std::copy(p.begin(), p.end(), target_rows.row(s + 1).begin());
    }
    result = rule.verify(tree, target_rows.view(), draft_rows.view(), verify_rng);
    out.stats.record(result, Rule::kLossless);
    for (const TokenId t : result.emitted_tokens(tree)) {
      ++out.pairs[static_cast<std::size_t>(prev * v + t)];
      prev = t;
      ++produced;
    }
  }
  const std::chrono::duration<double, std::micro> us = std::chrono::steady_clock::now() - start;
  out.us_per_round = us.count() / static_cast<double>(out.stats.num_rounds);
  return out;
}

Outcome run_autoregressive(const Bigram& target, const DemoOptions& o) {
  Outcome out;
  const auto v = target.vocab();
  out.pairs.assign(static_cast<std::size_t>(v * v), 0);
  RandomStream rng(o.seed, 3);
  TokenId prev = 0;
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < o.tokens; ++i) {
    const auto row = target.row(prev);
    const TokenId t = row_math::sample_row(row.data(), v, rng.uniform());
    ++out.pairs[static_cast<std::size_t>(prev * v + t)];
    out.stats.record(VerifyResult{{}, t, {}}, true);
    prev = t;
  }
  const std::chrono::duration<double, std::micro> us = std::chrono::steady_clock::now() - start;
  out.us_per_round = us.count() / static_cast<double>(o.tokens);
  return out;
}

// Count-weighted mean over contexts of TV(empirical next-token distribution, target row).
double mean_tv(const Outcome& out, const Bigram& target) {
  const auto v = target.vocab();
  double tv_sum = 0;
  std::int64_t total = 0;
  for (std::int64_t prev = 0; prev < v; ++prev) {
    std::int64_t n = 0;
    for (std::int64_t t = 0; t < v; ++t) n += out.pairs[static_cast<std::size_t>(prev * v + t)];
    if (n == 0) continue;
    const auto p = target.row(static_cast<TokenId>(prev));
    double tv = 0;
    for (std::int64_t t = 0; t < v; ++t)
      tv += std::fabs(static_cast<double>(out.pairs[static_cast<std::size_t>(prev * v + t)]) / static_cast<double>(n) -
                      p[static_cast<std::size_t>(t)]);
    tv_sum += 0.5 * tv * static_cast<double>(n);
    total += n;
  }
  return tv_sum / static_cast<double>(total);
}

void print_row(const std::string& name, bool lossless, const Outcome& out, const Bigram& target,
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
  const Bigram target(o.vocab, target_logits, params), draft(o.vocab, draft_logits, params);

  std::printf("specdec demo: bigram language, vocab %lld, draft depth %d, tree width %d, %lld tokens per method\n",
              static_cast<long long>(o.vocab), o.gamma, o.width, static_cast<long long>(o.tokens));
  std::printf("sampling: temperature %g, top_k %d, top_p %g, seed %llu; draft logit noise sd %g\n\n",
              static_cast<double>(o.temperature), o.top_k, static_cast<double>(o.top_p),
              static_cast<unsigned long long>(o.seed), static_cast<double>(o.draft_noise));
  std::string depth_header;
  for (std::int32_t d = 1; d <= o.gamma; ++d) depth_header += fmt::format("   d{}", d);
  std::printf("%-44s %-9s %6s %7s %s   %8s %9s\n", "method", "output", "tau", "accept", depth_header.c_str(),
              "TV", "us/round");

  print_row("autoregressive (noise floor)", true, run_autoregressive(target, o), target, o.gamma);
  GreedyAcceptance greedy;
  SpeculativeSampling chain;
  RecursiveRejectionSampling tree_rule;
  BlockVerification block;
  TraversalVerification traversal;
  TypicalAcceptance typical;
  if (params.is_greedy()) {
    const Method m{"greedy, chain", Children::kChain};
    print_row(m.name, true, run_method(greedy, m, target, draft, o), target, o.gamma);
    const Method t{fmt::format("greedy, top-{} tree", o.width), Children::kTopK};
    print_row(t.name, true, run_method(greedy, t, target, draft, o), target, o.gamma);
  }
  const Method m1{"speculative sampling, chain", Children::kChain};
  print_row(m1.name, true, run_method(chain, m1, target, draft, o), target, o.gamma);
  const Method b1{"block verification, chain", Children::kChain};
  print_row(b1.name, true, run_method(block, b1, target, draft, o), target, o.gamma);
  const Method m2{fmt::format("recursive rejection, {} i.i.d. children", o.width), Children::kSampled};
  print_row(m2.name, true, run_method(tree_rule, m2, target, draft, o), target, o.gamma);
  const Method t2{fmt::format("traversal verification, {} i.i.d. children", o.width), Children::kSampled};
  print_row(t2.name, true, run_method(traversal, t2, target, draft, o), target, o.gamma);
  const Method m3{fmt::format("recursive rejection, top-{} tree", o.width), Children::kTopK};
  print_row(m3.name, true, run_method(tree_rule, m3, target, draft, o), target, o.gamma);
  const Method m4{fmt::format("typical acceptance, top-{} tree", o.width), Children::kTopK};
  print_row(m4.name, false, run_method(typical, m4, target, draft, o), target, o.gamma);
  std::printf("\nTV: count-weighted mean total-variation distance between the empirical next-token\n"
              "distribution and the target's, per context. Lossless rules match the autoregressive\n"
              "noise floor; typical acceptance (Medusa) trades that for longer accepted runs.\n");
  return 0;
}

}  // namespace specdec::cli
