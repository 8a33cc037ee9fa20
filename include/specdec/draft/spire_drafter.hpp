// SPIRe's drafter (Neelam et al., arXiv 2504.06419, §3): a small Feedback
// Transformer draft whose memory of every verified token is the target's own
// activations, and whose KV cache keeps an attention sink and a sliding
// window (StreamingLLM), so a draft step reads few bytes at any context.
//
// What the drafter needs of its head (the libtorch SpireDraft is the real
// one, torch/spire_draft.hpp; tests use host fakes), host spans in and out:
//
//   memory_layer(), memory_layers()   the target activations each memory row
//                                     holds: the outputs of memory_layers()
//                                     consecutive target layers from
//                                     memory_layer() on, side by side
//                                     (ModelVerifier::set_feature_layers)
//   open(seq) / close(seq)            a sequence's cache, shared weights
//   remember(seq, rows, n)            commits n memory rows (the target's
//                                     activations of the next n positions)
//                                     and drops what step() staged
//   step(seqs, tokens, positions, out)
//                                     one draft forward of one token per
//                                     sequence, all sequences in one batch;
//                                     out = logits [n, vocab]; each token's
//                                     memory (its feedback mix) is staged
//
// A round: the verifier hands the target's activations of the root and the
// accepted tokens to target_features(); commit() remembers them, so the
// draft's past is always the target's (§3.3, "attending to target model
// activations"). The chain's tokens are drafted one step each, the bonus
// token first (it has no target activations yet); a step attends to the
// committed memories and to the chain's staged ones (the feedback memory).
// Chains only: a token's memory depends on its whole path.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/draft_tree.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/round.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/target_features.hpp"
#include "specdec/core/types.hpp"
#include "specdec/core/warp.hpp"
#include "specdec/engine/timed_model.hpp"

namespace specdec {

template <class H>
concept SpireHead = requires(H& h, const H& ch, std::int32_t seq, std::span<const float> rows, std::int64_t n,
                             std::span<const std::int32_t> seqs, std::span<const TokenId> tokens,
                             std::span<const std::int64_t> positions, std::span<float> out) {
  { ch.vocab_size() } -> std::convertible_to<std::int64_t>;
  { ch.max_context() } -> std::convertible_to<std::int64_t>;
  { ch.memory_layer() } -> std::convertible_to<std::int32_t>;
  { ch.memory_layers() } -> std::convertible_to<std::int32_t>;
  h.open(seq);
  h.close(seq);
  h.remember(seq, rows, n);
  h.step(seqs, tokens, positions, out);
};

template <SpireHead H>
class SpireDrafter {
 public:
  static constexpr bool kProvidesProbs = true;
  static constexpr bool kDraftsChainsOnly = true;

  // Drafts as sequence `seq` of `head` (the head keeps every sequence's cache,
  // so the requests of a batch draft in one forward).
  SpireDrafter(H& head, std::int32_t seq) : head_(&head), seq_(seq) {}
  std::int64_t vocab_size() const { return head_->vocab_size(); }
  std::int64_t max_context() const { return head_->max_context(); }
  const SamplingParams& sampling() const { return sampling_; }
  // Where the verifier writes the target's activations of each commit.
  TargetFeatures& target_features() { return features_; }
  // Where the head's time goes (steps are its forwards; remembering a
  // commit is its accept): the request's draft-model clock. The drafters of
  // a batch share one, as requests share a timed draft model.
  void set_clock(ModelClock* clock) { clock_ = clock; }

  void begin(std::span<const TokenId> prompt, const SamplingParams& sampling = {}) {
    if (prompt.empty()) throw InvalidArgumentError("SpireDrafter: the prompt is empty (it needs at least one token)");
    sampling.validate();
    sampling_ = sampling;
    warp_params_ = draft_sampling_for(sampling);
    head_->open(seq_);  // (re)opens: a request that failed left it open
    open_ = true;
    root_position_ = static_cast<std::int64_t>(prompt.size()) - 1;
    last_token_ = prompt.back();
    reset_round();
    remember(root_position_);
  }

  void propose(const DraftRequest& request, ProbMatrix& rows) {
    SpireDrafter* self = this;
    ProbMatrix* out = &rows;
    propose_batch(std::span(&self, 1), std::span(&request, 1), std::span(&out, 1));
  }

  // One head step for every drafter with something to draft: drafter i
  // answers requests[i] into *rows[i]. The drafters share one head.
  static void propose_batch(std::span<SpireDrafter* const> drafters, std::span<const DraftRequest> requests,
                            std::span<ProbMatrix* const> rows) {
    if (drafters.size() != requests.size() || drafters.size() != rows.size())
      throw ShapeError(fmt::format("SpireDrafter::propose_batch: {} drafters, {} requests and {} row buffers",
                                   drafters.size(), requests.size(), rows.size()));
    if (drafters.empty()) return;
    SpireDrafter& lead = *drafters[0];
    auto& b = lead.batch_;
    b.seqs.clear();
    b.tokens.clear();
    b.positions.clear();
    b.members.clear();
    for (std::size_t i = 0; i < drafters.size(); ++i) {
      SpireDrafter& d = *drafters[i];
      if (d.head_ != lead.head_) throw InvalidArgumentError("SpireDrafter::propose_batch: the drafters do not share one head");
      expect_draft_vocab(*rows[i], d.vocab_size(), "SpireDrafter");
      if (requests[i].frontier.empty()) continue;
      const auto [token, position] = d.stage(requests[i]);
      b.seqs.push_back(d.seq_);
      b.tokens.push_back(token);
      b.positions.push_back(position);
      b.members.push_back(i);
    }
    if (b.members.empty()) return;
    const auto vocab = lead.vocab_size();
    b.logits.resize(b.members.size() * static_cast<std::size_t>(vocab));
    const auto start = std::chrono::steady_clock::now();
    lead.head_->step(b.seqs, b.tokens, b.positions, b.logits);
    lead.tick(start, 1);
    for (std::size_t m = 0; m < b.members.size(); ++m) {
      SpireDrafter& d = *drafters[b.members[m]];
      d.warp_(std::span<const float>(b.logits).subspan(m * static_cast<std::size_t>(vocab), static_cast<std::size_t>(vocab)),
              d.warp_params_, rows[b.members[m]]->append_row());
    }
  }

  // `tokens`: the accepted drafts and the bonus. The verifier wrote the
  // target's activations of the root and the accepted drafts: one row per
  // token, the bonus's position excluded (it is the next root).
  void commit(std::span<const TokenId> tokens) {
    if (tokens.empty()) return;
    remember(static_cast<std::int64_t>(tokens.size()));
    root_position_ += static_cast<std::int64_t>(tokens.size());
    last_token_ = tokens.back();
    reset_round();
  }

  void end() { close_if_open(); }

 private:
  // The token and position of a request's single frontier slot: the root
  // (the last committed token) first, then each node below the last one.
  std::pair<TokenId, std::int64_t> stage(const DraftRequest& request) {
    if (request.tree == nullptr) throw InvalidArgumentError("SpireDrafter: the request has no tree");
    if (request.frontier.size() != 1)
      throw InvalidArgumentError(fmt::format(
          "SpireDrafter: {} slots in one request; SPIRe drafts a chain, one token per step", request.frontier.size()));
    const DraftTree& tree = *request.tree;
    const auto slot = request.frontier[0];
    if (slot == DraftTree::kRoot) {
      if (last_node_ != kNothing) throw InvalidArgumentError("SpireDrafter: the root was already proposed this round");
      if (tree.root_token() != last_token_)
        throw InvalidArgumentError(fmt::format("SpireDrafter: the tree's root token {} is not the last committed token {}",
                                               tree.root_token(), last_token_));
      last_node_ = DraftTree::kRoot;
      ++staged_;
      return {last_token_, root_position_};
    }
    if (last_node_ == kNothing)
      throw InvalidArgumentError("SpireDrafter: a node was proposed before the root of the round");
    if (tree.parent(slot) != last_node_)
      throw InvalidArgumentError(fmt::format(
          "SpireDrafter: node {} is not the child of the last drafted node {} (SPIRe drafts chains)", slot, last_node_));
    last_node_ = slot;
    return {tree.token(slot), root_position_ + staged_++};
  }

  // Commits the verifier's rows of the last n positions.
  void remember(std::int64_t n) {
    if (features_.rows() != n)
      throw ShapeError(fmt::format("SpireDrafter: {} positions to remember but {} target activation rows (the verifier "
                                   "needs a feature sink)",
                                   n, features_.rows()));
    const auto start = std::chrono::steady_clock::now();
    head_->remember(seq_, features_.all(), n);
    tick(start, 0);
  }

  void tick(std::chrono::steady_clock::time_point start, std::int64_t forwards) {
    if (clock_ == nullptr) return;
    clock_->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    clock_->forwards += forwards;
  }

  void reset_round() {
    staged_ = 0;
    last_node_ = kNothing;
  }

  void close_if_open() {
    if (std::exchange(open_, false)) head_->close(seq_);
  }

  static constexpr std::int32_t kNothing = -2;  // no slot drafted this round

  H* head_;
  std::int32_t seq_;
  bool open_ = false;
  SamplingParams sampling_, warp_params_ = draft_sampling_for(SamplingParams{});
  Warper warp_;
  TargetFeatures features_;
  ModelClock* clock_ = nullptr;
  std::int64_t root_position_ = 0;   // the root's position: committed tokens before it
  TokenId last_token_ = 0;            // the last committed token (the round's root)
  std::int64_t staged_ = 0;           // steps drafted this round
  std::int32_t last_node_ = kNothing; // the slot the last step drafted
  // propose_batch's, on the batch's first drafter.
  struct Batch {
    std::vector<std::int32_t> seqs;
    std::vector<TokenId> tokens;
    std::vector<std::int64_t> positions;
    std::vector<std::size_t> members;
    std::vector<float> logits;
  } batch_;
};

}  // namespace specdec
