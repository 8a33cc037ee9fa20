// The vocabulary one speculative round passes between components
// (docs/design.md §1): the budget a LengthPolicy grants, the request a
// TreeBuilder makes of a Drafter, the batch a Model runs, and the outcome a
// policy observes.
#pragma once

#include <cstdint>
#include <span>

#include "specdec/core/bit_matrix.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/tensor_view.hpp"
#include "specdec/core/types.hpp"
#include "specdec/core/verify_result.hpp"

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
  // Children per expanded node, for builders that take it from the policy
  // (Lyanna's k, TokenInfoTreeBuilder); 0 = the builder's own.
  std::int32_t branch = 0;
};

// A TreeBuilder's request to a Drafter: next-token distributions for the
// `frontier` slots (DraftTree::kRoot or node indices) of `tree`, one row per
// slot in frontier order. An all-zero row means "no proposal here" (an n-gram
// drafter with no match): builders draft no children under that slot.
struct DraftRequest {
  const DraftTree* tree = nullptr;
  std::span<const std::int32_t> frontier;
};

// One request's drafted tree in the select phase, between drafting and
// scoring (a Selector, concepts.hpp). The selector either leaves the tree as
// drafted or writes the subtree the target should verify into `selected` and
// sets `use_selected`. A selected subtree keeps the root, is closed under
// ancestors, and keeps child modes the rule verifies losslessly: a slot whose
// children were chosen by looking at the drawn tokens is kDeterministic
// (prune_to_budget in core/draft_tree_ops.hpp does this). `draft_rows` are
// the draft distributions the drafted tree's slots refer to (a selector that
// scores the drafts, SV's GoodputSelector, reads them); `sampling` is the
// request's (a companion model warps its rows with it, as the target does).
struct Selection {
  std::int32_t seq = 0;
  const DraftTree* drafted = nullptr;
  DraftBudget budget;
  DraftTree* selected = nullptr;
  bool use_selected = false;
  ProbRows draft_rows{};
  SamplingParams sampling{0.0f};  // greedy unless set, as GenerationOptions::sampling
};

// What one engine step cost (a selector that learns the round's time from
// it, SV's GoodputSelector, has observe_step): the requests stepped, the
// tokens the target scored (roots and selected nodes), the seconds of the
// target's forward and of the whole step.
struct StepTiming {
  std::int32_t requests = 0;
  std::int64_t scored_tokens = 0;
  double score_seconds = 0.0;
  double step_seconds = 0.0;
};

// One sequence's tree in a Verifier's batched score: the root and the nodes
// of `tree` are scored for sequence `seq`, and its rows warped with its
// request's `sampling` (requests of one batch may sample differently).
struct ScoreItem {
  std::int32_t seq = 0;
  const DraftTree* tree = nullptr;
  SamplingParams sampling{0.0f};  // greedy unless set, as GenerationOptions::sampling
};

// An ancestor mask in the packed form a kernel reads (SGLang's bit-packed
// tree mask, FlashInfer's packed_custom_mask): `size` rows of
// `words_per_row` 64-bit words, bit j of row i set when query i may attend to
// key j. It views memory the caller owns (a BitMatrix on the host, or a copy
// on the model's device); an empty mask means a causal chain.
struct PackedMask {
  const std::uint64_t* words = nullptr;
  std::int32_t size = 0;
  std::int32_t words_per_row = 0;
  Device device{};

  bool empty() const { return words == nullptr; }
  // Host masks only.
  bool test(std::int32_t i, std::int32_t j) const {
    return (words[static_cast<std::size_t>(i) * static_cast<std::size_t>(words_per_row) +
                  static_cast<std::size_t>(j >> 6)] >>
            (j & 63)) &
           1u;
  }
  static PackedMask of(const BitMatrix& m) { return {m.words().data(), m.size(), m.words_per_row(), Device{}}; }
};

// How a Model keeps one sequence's keys and values, chosen when the sequence
// is opened. Dense keeps every token. A sink + window cache (StreamingLLM,
// arXiv 2309.17453, §3.2) keeps the first `sink` committed tokens and the last
// `window`, so its memory stays constant as the sequence grows: the sparse-KV
// drafts of MagicDec (arXiv 2408.11049, §4.1) and SPIRe (arXiv 2504.06419,
// §3.1). The window holds committed tokens; a forward's staged tokens (the
// pending chain, a draft tree) see one another as in a dense cache, in
// addition to the sink and the window. Callers always pass text positions;
// `positions` says how the model rotates keys and queries with them:
//  - kText: by their positions in the text (SPIRe);
//  - kCache: by their positions within the cache, sink first, as StreamingLLM
//    and MagicDec do: once tokens have been evicted, the sink sits closer to
//    the queries than it does in the text.
// A model refuses a policy it does not implement with UnsupportedError, and
// an invalid one (a negative sink, a window below 1) with
// InvalidArgumentError.
struct CachePolicy {
  enum class Kind : std::uint8_t { kDense, kSinkWindow };
  enum class Positions : std::uint8_t { kText, kCache };
  Kind kind = Kind::kDense;
  std::int64_t sink = 0;
  std::int64_t window = 0;
  Positions positions = Positions::kText;

  static CachePolicy dense() { return {}; }
  static CachePolicy sink_window(std::int64_t sink, std::int64_t window, Positions positions = Positions::kText) {
    return {Kind::kSinkWindow, sink, window, positions};
  }
  bool operator==(const CachePolicy&) const = default;
};

// One sequence's new tokens in a Model forward: their positions (absolute,
// chosen by the caller) and the ancestor mask among them (every new token
// sees the whole committed prefix).
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
  PackedMask mask{};
  bool extend_staged = false;
};

// The outputs are written into memory the caller owns, so forwards are
// re-entrant: a draft role and a target role, or two threads on different
// sequences, never share an output buffer. Rows follow the request (sequence
// 0's tokens first, then sequence 1's, ...). `logits` is [total new tokens,
// vocab] and `hidden` [total new tokens, hidden], float32 and row-contiguous,
// on whatever device the caller chose (a model that cannot write there throws
// UnsupportedError). An empty view means "not wanted": with neither, a
// forward only fills the cache (a prefill).
struct ForwardRequest {
  std::span<const SequenceInput> sequences;
  TensorView logits{};
  TensorView hidden{};
  std::int32_t hidden_layer = -1;  // which layer's output; -1 = after the final norm
  // How many consecutive layers' outputs, from hidden_layer on, side by side
  // in each row: `hidden` is then [total new tokens, hidden_layers * hidden]
  // (a SPIRe draft's memories, arXiv 2504.06419 §3.3, read the inputs of
  // several target layers). A model that writes one layer only throws
  // UnsupportedError for more.
  std::int32_t hidden_layers = 1;
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

// One verified round as an engine's observers see it (profiling and
// research tools: `specdec profile-sv`, the same-drafts rule comparison).
struct RoundView {
  std::int32_t seq = 0;
  const DraftTree* tree = nullptr;  // the verified tree
  ProbRows target;                  // the target's rows: [root, tree nodes]; empty when the
                                    // verifier ran the rule where its rows are (RuleVerifier)
  ProbRows draft;                   // the rows the tree's slots refer to
  const VerifyResult* result = nullptr;
};

}  // namespace specdec
