// Drafter backed by an independent small language model with its own KV cache
// (Leviathan et al. 2023; Chen et al. 2023): any Model, usually a distilled
// draft of the target sharing its tokenizer.
//
// Within a round the drafter stages, in the draft model's cache, the pending
// committed tokens (those not cached yet, ending with the tree's root) and
// then every tree node whose next-token distribution a builder asked for, one
// forward per propose() call (a whole tree level at once, under the ancestor
// mask, with Model's extend_staged). A request that starts at the root may
// also name nodes below it (a tail carried from the last round, DuoDecoding):
// the pending tokens, the root and those nodes then go in one forward.
// commit() keeps, after the pending tokens,
// the staged nodes that spell the committed tokens — their keys and values
// are exact, since they depend only on the token and its ancestors — and drops
// the rest. The last committed token (the next root) is never kept: it is
// always fed again, so the root's distribution always comes from a forward.
#pragma once

#include <cstdint>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/concepts.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/logit_rows.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/warp.hpp"

namespace specdec {

template <Model M>
class ModelDrafter {
 public:
  static constexpr bool kProvidesProbs = true;

  // The drafter (re)opens sequence `seq` of `model` in begin(), with the
  // `cache` policy, and closes it in end().
  ModelDrafter(M& model, std::int32_t seq, const CachePolicy& cache = {}) : model_(&model), seq_(seq), cache_(cache) {}

  std::int64_t vocab_size() const { return model_->vocab_size(); }
  std::int64_t max_context() const { return model_->max_context(); }
  M& model() { return *model_; }
  // The request's sampling (begin); the draft rows are warped with
  // draft_sampling_for(sampling()).
  const SamplingParams& sampling() const { return sampling_; }

  // A new sequence for a request that samples with `sampling`: the draft rows
  // follow it (the same warp for a sampled request, temperature 1 to rank
  // candidates for a greedy one: draft_sampling_for).
  void begin(std::span<const TokenId> prompt, const SamplingParams& sampling = {}) {
    if (prompt.empty()) throw InvalidArgumentError("ModelDrafter: the prompt is empty (it needs at least one token)");
    sampling.validate();
    sampling_ = sampling;
    warp_params_ = draft_sampling_for(sampling);
    model_->open(seq_, cache_);
    open_ = true;
    context_.assign(prompt.begin(), prompt.end());
    cached_ = 0;
    reset_round();
  }

  void propose(const DraftRequest& request, ProbMatrix& rows) {
    if (!stage(request, rows)) return;
    const auto n = static_cast<std::int64_t>(input_.tokens.size());
    ForwardRequest forward{std::span(&input_, 1)};
    forward.logits = logits_.view(n, vocab_size());
    model_->forward(forward);
    append_rows(logits_.written(forward.logits, n, vocab_size(), "ModelDrafter"), 0, rows);
  }

  // propose() for several sequences in one forward of their shared model
  // (the engine drafts a batch's chains level by level with it): drafter i
  // answers requests[i] into *rows[i].
  static void propose_batch(std::span<ModelDrafter* const> drafters, std::span<const DraftRequest> requests,
                            std::span<ProbMatrix* const> rows) {
    if (drafters.size() != requests.size() || drafters.size() != rows.size())
      throw ShapeError(fmt::format("ModelDrafter::propose_batch: {} drafters, {} requests and {} row buffers",
                                   drafters.size(), requests.size(), rows.size()));
    if (drafters.empty()) return;
    ModelDrafter& lead = *drafters[0];
    lead.batch_inputs_.clear();
    lead.batch_members_.clear();
    std::int64_t total = 0;
    for (std::size_t i = 0; i < drafters.size(); ++i) {
      ModelDrafter& d = *drafters[i];
      if (d.model_ != lead.model_)
        throw InvalidArgumentError("ModelDrafter::propose_batch: the drafters do not share one model");
      if (!d.stage(requests[i], *rows[i])) continue;
      lead.batch_inputs_.push_back(d.input_);
      lead.batch_members_.push_back({i, total});
      total += static_cast<std::int64_t>(d.input_.tokens.size());
    }
    if (lead.batch_inputs_.empty()) return;
    const auto vocab = lead.vocab_size();
    ForwardRequest forward{lead.batch_inputs_};
    forward.logits = lead.logits_.view(total, vocab);
    lead.model_->forward(forward);
    const auto logits = lead.logits_.written(forward.logits, total, vocab, "ModelDrafter");
    for (const auto& [i, first] : lead.batch_members_) drafters[i]->append_rows(logits, first, *rows[i]);
  }

  // Caches the committed context but its last token now, so the round's
  // first propose() feeds the root alone: a host can overlap the draft's
  // prefill with the target's (SpeculativeEngine does, with a draft worker).
  void prefill() {
    if (!open_) throw InvalidArgumentError("ModelDrafter::prefill: the sequence was not begun");
    if (root_staged_ >= 0) throw InvalidArgumentError("ModelDrafter::prefill: a round is in progress");
    const auto n = static_cast<std::int64_t>(context_.size()) - 1 - cached_;
    if (n <= 0) return;
    tokens_.assign(context_.begin() + cached_, context_.end() - 1);
    positions_.resize(tokens_.size());
    std::iota(positions_.begin(), positions_.end(), cached_);
    input_ = SequenceInput{seq_, tokens_, positions_, PackedMask{}, false};
    model_->forward(ForwardRequest{std::span(&input_, 1)});
    keep_.resize(static_cast<std::size_t>(n));
    std::iota(keep_.begin(), keep_.end(), 0);
    model_->accept(seq_, keep_);
    cached_ += n;
  }

  void commit(std::span<const TokenId> tokens) {
    if (tokens.empty()) {
      // Nothing committed (a cross-vocabulary drafter's target token that
      // spells nothing here): the round's drafts go, the pending tokens but
      // the root stay cached, and the next round starts at the same root.
      if (root_staged_ < 0) return;
      keep_.resize(static_cast<std::size_t>(root_staged_));
      std::iota(keep_.begin(), keep_.end(), 0);
      model_->accept(seq_, keep_);
      cached_ += static_cast<std::int64_t>(keep_.size());
      reset_round();
      return;
    }
    context_.insert(context_.end(), tokens.begin(), tokens.end());
    if (root_staged_ < 0) return;  // nothing drafted this round: all of it stays pending
    keep_.resize(static_cast<std::size_t>(root_staged_) + 1);
    std::iota(keep_.begin(), keep_.end(), 0);
    std::int32_t at = root_staged_;
    for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {  // the last token is the next root
      const auto next = staged_child(at, tokens[i]);
      if (next < 0) break;
      keep_.push_back(next);
      at = next;
    }
    model_->accept(seq_, keep_);
    cached_ += static_cast<std::int64_t>(keep_.size());
    reset_round();
  }

  // The sequence is over: its draft cache is freed.
  void end() { close_if_open(); }

 private:
  // Stages the request's tokens and builds input_; false when the frontier is
  // empty (nothing to run).
  bool stage(const DraftRequest& request, ProbMatrix& rows) {
    if (request.tree == nullptr) throw InvalidArgumentError("ModelDrafter: the request has no tree");
    expect_draft_vocab(rows, vocab_size(), "ModelDrafter");
    if (request.frontier.empty()) return false;
    const DraftTree& tree = *request.tree;
    const bool at_root = request.frontier[0] == DraftTree::kRoot;
    tokens_.clear();
    positions_.clear();
    std::int32_t first_new = 0;  // staged index of this forward's first token
    if (at_root) {
      stage_root(tree);
    } else {
      if (root_staged_ < 0)
        throw InvalidArgumentError("ModelDrafter: a node was proposed before the root of the round");
      first_new = static_cast<std::int32_t>(staged_.size());
    }
    const auto nodes = at_root ? request.frontier.subspan(1) : request.frontier;
    stage_nodes(tree, nodes);
    const bool causal = at_root && nodes.empty();  // the pending chain alone needs no mask
    if (!causal) build_mask(at_root ? 0 : first_new);
    input_ = SequenceInput{seq_, tokens_, positions_, causal ? PackedMask{} : PackedMask::of(mask_), !at_root};
    rows_from_root_ = at_root;
    return true;
  }

  // Warps this drafter's rows of a forward (its tokens start at row `first`)
  // into `rows`, following the frontier: the root's (the last pending
  // token's), then one per node.
  void append_rows(const ProbRows& logits, std::int64_t first, ProbMatrix& rows) {
    const auto n = static_cast<std::int64_t>(input_.tokens.size());
    const auto first_row = rows_from_root_ ? std::int64_t{root_staged_} : std::int64_t{0};
    for (std::int64_t i = first_row; i < n; ++i) warp_(logits.row(first + i), warp_params_, rows.append_row());
  }

  struct Staged {
    TokenId token;
    std::int32_t parent;  // staged index, -1 for the first pending token
  };

  // Stages the pending tokens (ending with the root) as a causal chain.
  void stage_root(const DraftTree& tree) {
    if (root_staged_ >= 0) throw InvalidArgumentError("ModelDrafter: the root was already proposed this round");
    if (tree.root_token() != context_.back())
      throw InvalidArgumentError(fmt::format(
          "ModelDrafter: the tree's root token {} is not the last committed token {}", tree.root_token(),
          context_.back()));
    staged_.clear();
    tokens_.assign(context_.begin() + cached_, context_.end());
    positions_.resize(tokens_.size());
    std::iota(positions_.begin(), positions_.end(), cached_);
    for (std::size_t i = 0; i < tokens_.size(); ++i)
      staged_.push_back({tokens_[i], static_cast<std::int32_t>(i) - 1});
    root_staged_ = static_cast<std::int32_t>(staged_.size()) - 1;
    node_staged_.assign(static_cast<std::size_t>(tree.size()), -1);
  }

  // Stages tree nodes after everything staged; each node's parent is the root
  // or a node staged before it (in an earlier forward or earlier in this one).
  void stage_nodes(const DraftTree& tree, std::span<const std::int32_t> nodes) {
    node_staged_.resize(static_cast<std::size_t>(tree.size()), -1);
    const auto root_position = static_cast<std::int64_t>(context_.size()) - 1;
    for (const auto node : nodes) {
      if (node == DraftTree::kRoot)
        throw InvalidArgumentError("ModelDrafter: the root can only be the first slot of a request");
      const auto parent = tree.parent(node);  // throws on a bad index
      const auto parent_staged = parent == DraftTree::kRoot ? root_staged_ : node_staged_[static_cast<std::size_t>(parent)];
      if (parent_staged < 0)
        throw InvalidArgumentError(fmt::format("ModelDrafter: node {} was proposed before its parent {}", node, parent));
      if (node_staged_[static_cast<std::size_t>(node)] >= 0)
        throw InvalidArgumentError(fmt::format("ModelDrafter: node {} was already proposed this round", node));
      tokens_.push_back(tree.token(node));
      positions_.push_back(root_position + tree.depth(node));
      node_staged_[static_cast<std::size_t>(node)] = static_cast<std::int32_t>(staged_.size());
      staged_.push_back({tree.token(node), parent_staged});
    }
  }

  // The ancestor mask over staged entries [0, size): entries from `first_new`
  // on (this forward's tokens) see themselves and their staged ancestors.
  void build_mask(std::int32_t first_new) {
    const auto size = static_cast<std::int32_t>(staged_.size());
    mask_ = BitMatrix(size);
    for (auto self = first_new; self < size; ++self)
      for (auto a = self; a >= 0; a = staged_[static_cast<std::size_t>(a)].parent) mask_.set(self, a);
  }

  std::int32_t staged_child(std::int32_t parent, TokenId token) const {
    for (std::size_t i = static_cast<std::size_t>(root_staged_) + 1; i < staged_.size(); ++i)
      if (staged_[i].parent == parent && staged_[i].token == token) return static_cast<std::int32_t>(i);
    return -1;
  }

  void close_if_open() {
    if (std::exchange(open_, false)) model_->close(seq_);
  }

  void reset_round() {
    staged_.clear();
    node_staged_.clear();
    root_staged_ = -1;
  }

  M* model_;
  std::int32_t seq_;
  SamplingParams sampling_, warp_params_ = draft_sampling_for(SamplingParams{});  // the request's; the drafts'
  CachePolicy cache_;
  bool open_ = false;  // seq_ is open in the model
  Warper warp_;
  HostRows logits_;
  std::vector<TokenId> context_;  // every committed token
  std::int64_t cached_ = 0;       // leading tokens of context_ in the draft cache
  std::vector<Staged> staged_;    // this round's staged tokens, in forward order
  std::vector<std::int32_t> node_staged_;  // tree node -> staged index, -1 if not staged
  std::int32_t root_staged_ = -1;
  std::vector<std::int32_t> keep_;
  std::vector<TokenId> tokens_;
  std::vector<std::int64_t> positions_;
  BitMatrix mask_;
  SequenceInput input_;
  bool rows_from_root_ = false;
  // propose_batch's, on the batch's first drafter.
  struct Member {
    std::size_t drafter;
    std::int64_t first_row;
  };
  std::vector<SequenceInput> batch_inputs_;
  std::vector<Member> batch_members_;
};

}  // namespace specdec
