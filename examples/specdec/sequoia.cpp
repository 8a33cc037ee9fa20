// `specdec sequoia`: measures the positional acceptance vector p_k (the chance
// that the verifier accepts the k-th ranked draft child of an accepted node,
// Sequoia, arXiv 2402.12374, §3.1.1, Definition 3.2) on prompt sets, then
// prints the optimal tree for a node budget as a `sequoia:p=...` method spec
// and as Medusa choices.
//
// The measuring tree is a spine of fans: every node on the rank-0 path gets
// `width` top-ranked children, so each round observes every rank at each depth
// its spine survives to (greedy verification, deterministic top-k children).
#include "sequoia.hpp"

#include <cstdio>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "session.hpp"
#include "specdec/accept/greedy.hpp"
#include "specdec/core/error.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/speculative_decoder.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/tree/sequoia.hpp"
#include "specdec/tree/static_tree_builder.hpp"
#include "specdec/verify/model_verifier.hpp"

namespace specdec::cli {

void add_sequoia_options(CLI::App& cmd, SequoiaCommand& s) {
  cmd.add_option("--target", s.target, "target model directory");
  cmd.add_option("--draft", s.draft, "draft model directory");
  cmd.add_option("--tokenizer", s.tokenizer, "tokenizer (default: beside --target)");
  cmd.add_option("--prompts", s.prompt_sets, "prompt sets (JSON lines with a \"prompt\" field)")->required();
  cmd.add_option("--num-prompts", s.num_prompts, "prompts per set (the first N)");
  cmd.add_option("--max-new-tokens", s.max_new_tokens, "tokens per generation");
  cmd.add_option("--width", s.width, "ranked children measured per accepted node");
  cmd.add_option("--depth", s.depth, "depth of the measuring tree");
  cmd.add_option("--budget", s.budget, "draft nodes of the tree to build");
  cmd.add_option("--max-depth", s.max_depth, "depth limit of the tree to build");
  cmd.add_option("--threads", s.threads, "CPU threads (0 = all cores)");
  add_dtype_option(cmd, s.dtype);
}

int run_sequoia(const SequoiaCommand& c) {
  if (c.width < 1 || c.depth < 1) throw InvalidArgumentError("sequoia: --width and --depth must be >= 1");
  auto s = load_session(c.target, c.draft, c.tokenizer, c.threads, c.dtype);
  if (!s.draft) throw InvalidArgumentError("sequoia: needs --draft");
  std::vector<ShapeNode> nodes;
  std::int32_t spine = -1;  // the rank-0 node of the previous level
  for (std::int32_t d = 0; d < c.depth; ++d) {
    const auto first = static_cast<std::int32_t>(nodes.size());
    for (std::int32_t k = 0; k < c.width; ++k) nodes.push_back(ShapeNode{spine, k});
    spine = first;
  }
  const auto n = static_cast<std::int32_t>(nodes.size());
  ModelVerifier verifier(s.target);
  ModelDrafter drafter(*s.draft, 0);  // a greedy request: candidates ranked at temperature 1
  SpeculativeDecoder decoder(drafter, StaticTreeBuilder{StaticTreeShape(std::move(nodes))}, verifier,
                             GreedyAcceptance{}, FixedLength(DraftBudget{c.depth, n, n, 0.0f}));
  PositionalAcceptance measured;
  decoder.set_round_observer([&](const DraftTree& tree, const VerifyResult& r) { measured.observe(tree, r); });
  GenerationOptions options;
  options.max_new_tokens = c.max_new_tokens;
  options.sampling.temperature = 0.0f;
  for (const auto& path : c.prompt_sets) {
    std::ifstream in(path);
    if (!in) throw IoError(fmt::format("{}: cannot open the prompt set", path.string()));
    std::string line;
    for (std::int64_t i = 0; i < c.num_prompts && std::getline(in, line);) {
      if (line.empty()) continue;
      decoder.generate(s.tokenizer.encode(nlohmann::json::parse(line).at("prompt").get<std::string>(), true), options);
      std::fprintf(stderr, "\r%s: %lld prompts", path.stem().string().c_str(), static_cast<long long>(++i));
    }
    std::fprintf(stderr, "\n");
  }
  const auto p = measured.probabilities();
  std::string p_text;
  for (const auto v : p) p_text += fmt::format("{}{:.4f}", p_text.empty() ? "" : ",", v);
  std::printf("positional acceptance over %lld steps: p = %s\n", static_cast<long long>(measured.num_steps()),
              p_text.c_str());
  const auto shape = sequoia_shape(p, c.budget, c.max_depth);
  const auto choices = format_tree_shape(shape);
  std::printf("optimal tree for %d nodes, depth <= %d: %d nodes, depth %d, expected accepted drafts %.3f\n",
              c.budget, c.max_depth, shape.size(), shape.max_depth(), sequoia_expected_accepted(shape, p));
  std::printf("method: sequoia:p=%s:total=%d:depth=%d\nshape:  tree:shape=%s\n", p_text.c_str(), c.budget,
              c.max_depth, choices.c_str());
  return 0;
}

}  // namespace specdec::cli
