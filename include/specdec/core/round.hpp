// The vocabulary one speculative round passes between components
// (docs/design.md §1): the budget a LengthPolicy grants, the request a
// TreeBuilder makes of a Drafter, the batch a Model runs, and the outcome a
// policy observes.
#pragma once

#include <cstdint>
#include <span>

#include "specdec/core/bit_matrix.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/tensor_view.hpp"
#include "specdec/core/types.hpp"

namespace specdec {

// What a LengthPolicy grants a round.
struct DraftBudget {
  std::int32_t max_depth = 4;     // deepest draft level
  std::int32_t max_nodes = 4;     // nodes the builder may draft
  std::int32_t verify_nodes = 4;  // nodes sent to the target (<= max_nodes)
  // Confidence early stop (HF's assistant_confidence_threshold; see
  // docs/methods.md): a builder does not expand a node whose draft
  // probability is below this. 0 = off. Lossless: the decision depends on the
  // draft side only.
  float stop_below = 0.0f;
};

// A TreeBuilder's request to a Drafter: next-token distributions for the
// `frontier` slots (DraftTree::kRoot or node indices) of `tree`, one row per
// slot in frontier order. An all-zero row means "no proposal here" (an n-gram
// drafter with no match): builders draft no children under that slot.
struct DraftRequest {
  const DraftTree* tree = nullptr;
  std::span<const std::int32_t> frontier;
};

// One sequence's new tokens in a Model forward: their positions and the
// ancestor mask among them (every new token sees the whole committed prefix).
// A null mask means a causal chain.
//
// extend_staged: the tokens staged by this sequence's previous forward stay
// staged and the new tokens are appended after them (a drafter growing a tree
// one level per forward). The mask is then square over staged + new tokens
// and only its last rows (the new tokens) are read; accept() indexes all of
// them. Without it, a forward drops what the previous one staged.
struct SequenceInput {
  std::int32_t seq_id = 0;
  std::span<const TokenId> tokens;
  std::span<const std::int64_t> positions;
  const BitMatrix* mask = nullptr;
  bool extend_staged = false;
};

struct ForwardRequest {
  std::span<const SequenceInput> sequences;
  bool want_hidden = false;         // also return hidden states
  std::int32_t hidden_layer = -1;   // which layer's output; -1 = after the final norm
  bool want_logits = true;          // false: fill the cache only (prefill)
};

// Rows follow the request: sequence 0's tokens first, then sequence 1's, ...
struct ForwardResult {
  TensorView logits;  // [total new tokens, vocab]
  TensorView hidden;  // [total new tokens, hidden] when requested, else empty
};

// What a LengthPolicy observes after each round: the verified tree (tokens,
// parents, each node's draft probability), the accepted path, how much was
// drafted and verified, and where the round's time went, model by model.
// The pointers and spans are valid during observe() only.
struct RoundOutcome {
  std::int32_t num_drafted = 0;   // nodes the drafter proposed (a dynamic builder's whole pool)
  std::int32_t num_verified = 0;  // nodes sent to the target (the tree)
  std::int32_t num_accepted = 0;  // drafts accepted
  double draft_us = 0.0;          // building the tree, drafter forwards included
  double verify_us = 0.0;         // target forward, acceptance and commits
  // Model time inside this round, when the models are wrapped in TimedModel
  // (zero otherwise): the target's forward(s), the drafter's.
  double target_model_us = 0.0, draft_model_us = 0.0;
  std::int32_t target_forwards = 0, draft_forwards = 0;
  const DraftTree* tree = nullptr;                // the verified tree
  std::span<const std::int32_t> accepted_nodes;   // node indices of the accepted path, root to leaf
};

}  // namespace specdec
