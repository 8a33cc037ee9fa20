// torch.ops.specdec: the schemas, and the CPU kernels, which run the host
// rules themselves (include/specdec/accept/) tree by tree. The CUDA kernels
// (torch_ops_cuda.cpp) emit the same tokens from the same seeds: both draw
// philox_uniform(seed_b, b, offset_b + j) and share the rules' row
// functions. docs/python.md, "PyTorch operators", documents each operator.
#include "torch_ops.hpp"

#include <cmath>
#include <span>

#include "specdec/accept/block_verification.hpp"
#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/accept/speculative_sampling.hpp"
#include "specdec/accept/traversal_verification.hpp"
#include "specdec/accept/typical_acceptance.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/warp.hpp"

namespace specdec::torch_ops {
namespace {

RandomStream row_stream(const RowSeeds& seeds, std::int64_t b) {
  return RandomStream(static_cast<std::uint64_t>(seeds.seeds.data_ptr<std::int64_t>()[b]),
                      static_cast<std::uint64_t>(b),
                      static_cast<std::uint64_t>(seeds.offsets.data_ptr<std::int64_t>()[b]));
}

// Runs `verify(rule)` with the rule the name picks.
template <class F>
void with_rule(std::string_view name, double threshold, double alpha, F&& verify) {
  if (name == "greedy") {
    GreedyAcceptance r;
    verify(r);
  } else if (name == "speculative_sampling") {
    SpeculativeSampling r;
    verify(r);
  } else if (name == "recursive_rejection_sampling") {
    RecursiveRejectionSampling r;
    verify(r);
  } else if (name == "block_verification") {
    BlockVerification r;
    verify(r);
  } else if (name == "traversal_verification") {
    TraversalVerification r;
    verify(r);
  } else {
    check_rule_name(name);
    TypicalAcceptance r(TypicalAcceptanceParams{static_cast<float>(threshold), static_cast<float>(alpha)});
    verify(r);
  }
}

ChildMode child_mode(std::uint8_t draw, std::int64_t b, std::int64_t slot) {
  switch (draw) {
    case 0:
      return ChildMode::kDeterministic;
    case 1:
      return ChildMode::kSampledWithReplacement;
    case 2:
      return ChildMode::kSampledWithoutReplacement;
  }
  throw InvalidArgumentError(fmt::format("slot_draws[{}, {}] is {}; {}", b, slot, draw,
                                         "0 (deterministic), 1 (i.i.d.) or 2 (without replacement)"));
}

// Tree b of the flat layout as a DraftTree whose slot s reads draft row
// s + 1 (the layout's) when its children were sampled.
DraftTree tree_of(const FlatTreeArgs& a, std::int64_t b, std::int64_t n) {
  const auto* parents = a.parents.data_ptr<std::int32_t>() + b * a.nodes;
  const auto* tokens = a.tokens.data_ptr<std::int32_t>() + b * a.nodes;
  const auto* draws = a.slot_draws.data_ptr<std::uint8_t>() + b * (a.nodes + 1);
  const float* draft = a.draft ? a.draft->data_ptr<float>() + b * (a.nodes + 1) * a.vocab : nullptr;
  DraftTree tree;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t parent = parents[i];
    const TokenId token = tokens[i];
    if (token < 0 || token >= a.vocab)
      throw InvalidTreeError(
          fmt::format("tree {}: node {} has token {}, outside [0, {})", b, i, token, a.vocab));
    if (parent < -1 || parent >= i)
      throw InvalidTreeError(fmt::format("tree {}: node {} has parent {}, not in [-1, {})", b, i, parent, i));
    float q = 1.0f;
    if (draws[parent + 1] != 0) {
      if (draft == nullptr)
        throw InvalidArgumentError(
            fmt::format("tree {}: slot {} was sampled (slot_draws {}), but draft_probs is None", b, parent,
                        draws[parent + 1]));
      q = draft[(parent + 1) * a.vocab + token];
    }
    tree.add_node(parent, token, q);
  }
  for (std::int32_t slot = DraftTree::kRoot; slot < tree.size(); ++slot) {
    if (tree.num_children(slot) == 0) continue;
    const ChildMode mode = child_mode(draws[slot + 1], b, slot);
    tree.set_children_source(slot, mode == ChildMode::kDeterministic ? -1 : slot + 1, mode);
  }
  return tree;
}

TreeOutcome verify_trees_cpu(c10::string_view rule, const Tensor& parents, const Tensor& tokens,
                             const Tensor& slot_draws, const OptTensor& draft_probs,
                             const Tensor& target_probs, const OptTensor& tree_nodes, std::int64_t max_depth,
                             const OptTensor& seed_arr, std::int64_t seed, const OptTensor& offset_arr,
                             std::int64_t offset, double posterior_threshold, double posterior_alpha) {
  return typed_errors([&] {
    const FlatTreeArgs a(rule, parents, tokens, slot_draws, draft_probs, target_probs, tree_nodes, max_depth);
    const RowSeeds seeds(seed_arr, seed, offset_arr, offset, a.batch, a.target.device());
    TreeOutcome out = a.outputs();
    auto* accepted = std::get<0>(out).data_ptr<std::int32_t>();
    auto* num_accepted = std::get<1>(out).data_ptr<std::int32_t>();
    auto* emitted = std::get<2>(out).data_ptr<std::int32_t>();
    with_rule(a.rule, posterior_threshold, posterior_alpha, [&](auto& verifier) {
      VerifyResult result;
      for (std::int64_t b = 0; b < a.batch; ++b) {
        const std::int64_t n = a.tree_nodes.defined() ? a.tree_nodes.data_ptr<std::int32_t>()[b] : a.nodes;
        if (n < 0 || n > a.nodes)
          throw ShapeError(fmt::format("tree_nodes[{}] is {}, outside [0, {}]", b, n, a.nodes));
        const DraftTree tree = tree_of(a, b, n);
        const ProbRows target(a.target.data_ptr<float>() + b * (a.nodes + 1) * a.vocab, n + 1, a.vocab);
        const ProbRows draft =
            a.draft ? ProbRows(a.draft->data_ptr<float>() + b * (a.nodes + 1) * a.vocab, n + 1, a.vocab)
                    : ProbRows();
        RandomStream rng = row_stream(seeds, b);
        verifier.verify(tree, target, draft, rng, result);
        if (result.num_accepted() > a.max_depth)
          throw InvalidArgumentError(
              fmt::format("tree {} accepted a path of {} nodes, deeper than max_depth {}", b,
                          result.num_accepted(), a.max_depth));
        for (std::int32_t d = 0; d < result.num_accepted(); ++d)
          accepted[b * a.max_depth + d] = result.accepted_nodes[static_cast<std::size_t>(d)];
        num_accepted[b] = result.num_accepted();
        emitted[b] = result.bonus_token;
      }
    });
    return out;
  });
}

// A chain-shaped call as flat trees: node i the child of node i - 1, slot s
// drafted from chain row s (row s + 1 of the flat layout).
template <class Rule>
std::tuple<Tensor, Tensor> chain_cpu(const OptTensor& draft_probs, const Tensor& draft_token_ids,
                                     const Tensor& target_probs, const OptTensor& seed_arr, std::int64_t seed,
                                     const OptTensor& offset_arr, std::int64_t offset) {
  return typed_errors([&] {
    const ChainArgs a(draft_probs, draft_token_ids, target_probs);
    const RowSeeds seeds(seed_arr, seed, offset_arr, offset, a.batch, a.target.device());
    const auto ints = a.target.options().dtype(at::kInt);
    Tensor output = at::full({a.batch, a.gamma + 1}, kNoToken, ints);
    Tensor emitted_drafts = at::empty({a.batch}, ints);
    auto* out = output.data_ptr<std::int32_t>();
    Rule rule;
    VerifyResult result;
    for (std::int64_t b = 0; b < a.batch; ++b) {
      const auto* tokens = a.tokens.data_ptr<std::int32_t>() + b * a.gamma;
      const float* q = a.draft ? a.draft->data_ptr<float>() + b * a.gamma * a.vocab : nullptr;
      DraftTree chain;
      for (std::int64_t i = 0; i < a.gamma; ++i) {
        if (tokens[i] < 0 || tokens[i] >= a.vocab)
          throw InvalidTreeError(
              fmt::format("request {}: draft token {} is {}, outside [0, {})", b, i, tokens[i], a.vocab));
        const auto parent = static_cast<std::int32_t>(i) - 1;
        chain.add_node(parent, tokens[i], q ? q[i * a.vocab + tokens[i]] : 1.0f);
        chain.set_children_source(parent, q ? static_cast<std::int32_t>(i) : -1,
                                  q ? ChildMode::kSampledWithReplacement : ChildMode::kDeterministic);
      }
      const ProbRows target(a.target.data_ptr<float>() + b * (a.gamma + 1) * a.vocab, a.gamma + 1, a.vocab);
      const ProbRows draft = q ? ProbRows(q, a.gamma, a.vocab) : ProbRows();
      RandomStream rng = row_stream(seeds, b);
      rule.verify(chain, target, draft, rng, result);
      const std::vector<TokenId> emitted = result.emitted_tokens(chain);
      for (std::size_t i = 0; i < emitted.size(); ++i)
        out[b * (a.gamma + 1) + static_cast<std::int64_t>(i)] = emitted[i];
      emitted_drafts.data_ptr<std::int32_t>()[b] = result.num_accepted();
    }
    return std::tuple<Tensor, Tensor>{output, emitted_drafts};
  });
}

// WarpRowStatus's codes (include/specdec/cuda/warp.hpp), found before
// warping so that a bad row is reported as the CUDA kernel reports it.
std::int32_t row_status(std::span<const float> logits, const SamplingParams& params) {
  try {
    params.validate();
  } catch (const InvalidArgumentError&) {
    return 3;
  }
  bool any_finite = false;
  for (const float v : logits) {
    if (std::isnan(v) || v == INFINITY) return 1;
    any_finite = any_finite || std::isfinite(v);
  }
  return any_finite ? 0 : 2;
}

std::tuple<Tensor, Tensor> warp_cpu(const Tensor& logits, const Tensor& temperature, const Tensor& top_k,
                                    const Tensor& top_p) {
  return typed_errors([&] {
    const WarpArgs a(logits, temperature, top_k, top_p);
    Tensor probs = at::zeros({a.rows, a.vocab}, a.logits.options());
    Tensor status = at::empty({a.rows}, a.logits.options().dtype(at::kInt));
    Warper warper;
    for (std::int64_t r = 0; r < a.rows; ++r) {
      SamplingParams params;
      params.temperature = a.temperature.data_ptr<float>()[r];
      params.top_k = a.top_k.data_ptr<std::int32_t>()[r];
      params.top_p = a.top_p.data_ptr<float>()[r];
      const std::span<const float> row(a.logits.data_ptr<float>() + r * a.vocab,
                                       static_cast<std::size_t>(a.vocab));
      const std::int32_t s = row_status(row, params);
      status.data_ptr<std::int32_t>()[r] = s;
      if (s == 0)
        warper(row, params,
               std::span(probs.data_ptr<float>() + r * a.vocab, static_cast<std::size_t>(a.vocab)));
    }
    return std::tuple<Tensor, Tensor>{probs, status};
  });
}

}  // namespace

TORCH_LIBRARY(specdec, m) {
  m.def(
      "warp(Tensor logits, Tensor temperature, Tensor top_k, Tensor top_p) -> (Tensor probs, Tensor status)");
  m.def(
      "chain_speculative_sampling(Tensor? draft_probs, Tensor draft_token_ids, Tensor target_probs, "
      "Tensor? seed_arr, int seed, Tensor? offset_arr, int offset) -> (Tensor output_token_ids, "
      "Tensor emitted_draft_token_num)");
  m.def(
      "block_verification(Tensor? draft_probs, Tensor draft_token_ids, Tensor target_probs, "
      "Tensor? seed_arr, int seed, Tensor? offset_arr, int offset) -> (Tensor output_token_ids, "
      "Tensor emitted_draft_token_num)");
  m.def(
      "verify_trees(str rule, Tensor parents, Tensor tokens, Tensor slot_draws, Tensor? draft_probs, "
      "Tensor target_probs, Tensor? tree_nodes, int max_depth, "
      "Tensor? seed_arr, int seed, Tensor? offset_arr, int offset, "
      "float posterior_threshold=0.09, float posterior_alpha=0.3) "
      "-> (Tensor accepted_nodes, Tensor num_accepted, Tensor emitted)");
}

TORCH_LIBRARY_IMPL(specdec, CPU, m) {
  m.impl("warp", &warp_cpu);
  m.impl("chain_speculative_sampling", &chain_cpu<SpeculativeSampling>);
  m.impl("block_verification", &chain_cpu<BlockVerification>);
  m.impl("verify_trees", &verify_trees_cpu);
}

}  // namespace specdec::torch_ops
