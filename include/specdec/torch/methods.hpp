// Every decoding method of the library assembled on the reference Llama model,
// chosen at run time by name (the CLI's `generate` and `bench`):
//
//   autoregressive                          the baseline
//   chain:k=4[:policy=fixed|heuristic|confidence][:threshold=0.4]
//                                           draft model, chain (Leviathan et al.)
//   tree[:shape=0;1;2;0.0;...]              draft model, static tree (Medusa-style choices)
//   dynamic[:top_k=4][:depth=4][:total=16]  draft model, EAGLE-2 dynamic tree
//   sequoia:p=0.6,0.2,...[:total=16][:depth=4]
//                                           draft model, Sequoia DP tree from a
//                                           measured positional acceptance vector
//   ngram[:k=4][:min=1][:max=3][:policy=...] prompt lookup, no draft model
//   lyanna[:k=4][:depth=3][:budget=12][:resample=1][:fusion=1][:r=0][:rbudget=4][:head=DIR]
//                                           Lyanna: hidden-state chain head, token-info
//                                           sampling, re-sampling, verification fusion
//   eagle[:top_k=4][:depth=3][:total=12][:head=DIR]
//                                           EAGLE-style feature head, EAGLE-2 dynamic tree
//
// Greedy decoding (temperature 0) verifies with the greedy rule and ranks draft
// candidates at temperature 1; sampling verifies with recursive rejection
// sampling (lossless), drafts chains by sampling the draft warped exactly like
// the target, and drafts trees with deterministic top-k children.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/sampling_params.hpp"
#include "specdec/engine/any_decoder.hpp"
#include "specdec/torch/llama_model.hpp"

namespace specdec::torch_backend {

struct MethodConfig {
  std::string name = "chain";
  std::int32_t k = 4;                 // chain / ngram length (initial length with the heuristic)
  std::string policy = "fixed";       // chain / ngram: fixed | heuristic | confidence
  float threshold = 0.4f;             // confidence policy
  std::string shape;                  // tree: Medusa choices "0;1;0.0" (empty: the default shape)
  std::int32_t top_k = 4, depth = 4, total = 16;  // dynamic (depth, total also bound sequoia)
  std::vector<double> acceptance;     // sequoia: p_1, p_2, ...
  std::int32_t ngram_min = 1, ngram_max = 3;
  // lyanna (k = branch, depth = chain steps N) and eagle
  std::int32_t budget = 12;           // lyanna: B, verified nodes of the fresh tree
  bool resample = true, fusion = true;
  std::int32_t resample_threshold = 0, resample_budget = 4;
  std::string head;                   // head directory; empty: <heads_dir>/lyanna or <heads_dir>/eagle

  // The spec this config round-trips to (for tables and JSON).
  std::string spec() const;
};

// Parses "name[:key=value]..." (see above); unknown names or keys, and values
// that do not parse, are InvalidArgumentError naming them.
MethodConfig parse_method(std::string_view spec);

// The default static tree of the `tree` method (12 nodes, depth 4).
std::string default_tree_shape();

// Builds the method on `target` (and `draft`, required by the draft-model
// methods). Both models keep sequence 0 for the decoder's use. The decoder
// borrows the models: they must outlive it. The feature-head methods load
// their head from config.head, or from `heads_dir`/lyanna (eagle).
AnyDecoder make_method(const MethodConfig& config, LlamaModel& target, LlamaModel* draft,
                       const SamplingParams& sampling, const std::filesystem::path& heads_dir = "models");

}  // namespace specdec::torch_backend
