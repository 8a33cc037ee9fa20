// SLEM, string-level exact match (Timor et al., ICML 2025, arXiv 2502.05202,
// §3.1): a draft model with its own vocabulary writes text; the text is
// re-tokenized with the target's vocabulary, and the target's tokens are
// proposed as one-hot guesses. Verification is by exact match: a draft token
// is kept when the target would have produced it. A one-hot guess x under
// any lossless rule keeps the target's law whatever chose x (accepted with
// probability p(x), otherwise the residual p minus x, renormalized): this is
// the n-gram drafter's argument (docs/acceptance.md, "Drafts from another
// vocabulary"). So SLEM fits the rules the n-gram drafter fits.
//
// A round, for a chain builder asking one target token after another:
//  1. The draft model drafts a few tokens of its own (drawn from its warped
//     rows as the request samples, or its top-1 for a greedy request); their
//     bytes are the draft text.
//  2. The text, cut after its last complete UTF-8 character, is encoded with
//     the target's vocabulary. The text may end inside a word whose target
//     token would be longer (" ca" of " cat"): by default that last token is
//     proposed and verification judges it, as the paper's implementation
//     does; with hold_back it waits for the next draft token. Holding back
//     cost more draft forwards than it saved here (docs/RESULTS.md, "Drafts
//     from another vocabulary"). A drafted EOS ends the text: the target's
//     EOS is proposed after it.
//  3. Proposals, once handed out, stay: later draft tokens only append to
//     them (the text after the proposals' bytes is re-encoded each time).
//  4. The builder asks for the next target token: if the proposals run out,
//     the draft drafts one more token and step 2 runs again, up to
//     2 x depth + 2 draft tokens a round; then the chain stops.
// After the round, the committed target text is spelled in draft tokens: the
// longest run of the draft's own tokens whose bytes begin the committed text
// (their keys and values stay cached), then the draft's encoding of the rest.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/accept/row_math.hpp"
#include "specdec/concepts.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/warp.hpp"
#include "specdec/draft/vocabulary_map.hpp"
#include "specdec/tokenizer/text_util.hpp"

namespace specdec {

// Inner: a drafter over the draft's vocabulary (ModelDrafter) whose rows are
// the draft model's warped distributions.
template <Drafter Inner>
class StringMatchDrafter {
 public:
  static_assert(Inner::kProvidesProbs,
                "StringMatchDrafter samples the draft's text: its inner drafter must "
                "provide distributions");
  static constexpr bool kProvidesProbs = false;  // one-hot guesses: the target's spelling of the draft text
  // The stream of the draft's own draws (the request's seed, another stream
  // than the engine's).
  static constexpr std::uint64_t kDrawStream = 0x534C454Dull;  // "SLEM"

  // `map` (draft -> target) must outlive the drafter and share the inner
  // drafter's vocabulary as its draft side.
  StringMatchDrafter(Inner inner, const VocabularyMap& map, bool hold_back = false)
      : inner_(std::move(inner)), map_(&map), hold_back_(hold_back) {
    if (inner_.vocab_size() != map.draft().size())
      throw InvalidArgumentError(
          fmt::format("StringMatchDrafter: the draft model has vocabulary {}, the map's draft "
                      "vocabulary {} has {} tokens",
                      inner_.vocab_size(), map.draft().name(), map.draft().size()));
  }

  std::int64_t vocab_size() const { return map_->target().size(); }
  Inner& inner() { return inner_; }
  // The draft tokens drafted this round (for tests and tracing).
  std::span<const TokenId> drafted() const { return drafted_; }

  void begin(std::span<const TokenId> prompt, const SamplingParams& sampling = {}) {
    if (prompt.empty()) throw InvalidArgumentError("StringMatchDrafter: the prompt is empty");
    draft_tokens_.clear();
    map_->respell(prompt, draft_tokens_);
    if (draft_tokens_.empty())
      throw InvalidArgumentError("StringMatchDrafter: the prompt spells nothing in the draft's vocabulary");
    inner_.begin(draft_tokens_, sampling);
    greedy_ = sampling.is_greedy();
    rng_ = RandomStream(sampling.seed, kDrawStream);
    root_ = prompt.back();
    draft_root_ = draft_tokens_.back();
    reset_round();
  }

  void prefill() requires requires(Inner& d) { d.prefill(); }
  { inner_.prefill(); }

  // One row per frontier slot: one-hot at the proposal for the slot's depth
  // when the path to the slot spells the proposals before it, all zero
  // otherwise.
  void propose(const DraftRequest& request, ProbMatrix& rows) {
    if (request.tree == nullptr) throw InvalidArgumentError("StringMatchDrafter: the request has no tree");
    const DraftTree& tree = *request.tree;
    if (tree.root_token() != root_)
      throw InvalidArgumentError(
          fmt::format("StringMatchDrafter: the tree's root token {} is not the last committed token {}",
                      tree.root_token(), root_));
    expect_draft_vocab(rows, vocab_size(), "StringMatchDrafter");
    for (const std::int32_t slot : request.frontier) {
      const auto depth = slot == DraftTree::kRoot ? 0 : tree.depth(slot);
      auto row = rows.append_row();
      if (!spells_proposals(tree, slot)) continue;
      if (draft_until(depth + 1))
        row[static_cast<std::size_t>(proposals_[static_cast<std::size_t>(depth)])] = 1.0f;
    }
  }

  void commit(std::span<const TokenId> tokens) {
    if (tokens.empty()) return;
    draft_tokens_.clear();
    bool control = false;
    for (const TokenId t : tokens)
      control = control || map_->target().kind(t) == TextVocabulary::Kind::kControl;
    if (control) {
      map_->translate(tokens, draft_tokens_);
    } else {
      // The draft's own tokens while their bytes begin the committed text.
      std::string text;
      map_->target().append_bytes(tokens, text);
      std::size_t at = 0;
      for (const TokenId d : drafted_) {
        const auto piece = map_->draft().bytes(d);
        if (map_->draft().kind(d) == TextVocabulary::Kind::kControl ||
            text.compare(at, piece.size(), piece) != 0)
          break;
        draft_tokens_.push_back(d);
        at += piece.size();
      }
      map_->draft().encode(std::string_view(text).substr(at), draft_tokens_);
    }
    inner_.commit(draft_tokens_);
    root_ = tokens.back();
    if (!draft_tokens_.empty()) draft_root_ = draft_tokens_.back();
    reset_round();
  }

  void end() { inner_.end(); }

 private:
  bool spells_proposals(const DraftTree& tree, std::int32_t slot) const {
    for (std::int32_t i = slot; i != DraftTree::kRoot; i = tree.parent(i)) {
      const auto d = static_cast<std::size_t>(tree.depth(i)) - 1;
      if (d >= proposals_.size() || proposals_[d] != tree.token(i)) return false;
    }
    return true;
  }

  // Drafts until `n` target tokens are proposed; false if the text ended
  // (a drafted EOS) or the round's draft tokens ran out first.
  bool draft_until(std::int32_t n) {
    const auto cap = 2 * static_cast<std::size_t>(n) + 2;
    while (proposals_.size() < static_cast<std::size_t>(n)) {
      if (ended_ || exhausted_ || drafted_.size() >= cap) return false;
      draft_one();
      update_proposals();
    }
    return true;
  }

  // One forward of the draft model at the end of its chain, and one token
  // from its row.
  void draft_one() {
    if (drafted_.empty()) chain_.clear(draft_root_);
    const std::int32_t at = drafted_.empty() ? DraftTree::kRoot : chain_.size() - 1;
    const std::array<std::int32_t, 1> frontier{at};
    const auto r = draft_rows_.num_rows();
    inner_.propose(DraftRequest{&chain_, frontier}, draft_rows_);
    if (draft_rows_.num_rows() != r + 1)
      throw InvalidArgumentError("StringMatchDrafter: the inner drafter did not answer with one row");
    const auto q = draft_rows_.row(r);
    const TokenId token =
        greedy_ ? argmax(q)
                : row_math::sample_row(q.data(), static_cast<std::int64_t>(q.size()), rng_.uniform());
    if (token == kNoToken) {  // an all-zero row: nothing more to draft this round
      exhausted_ = true;
      return;
    }
    chain_.add_node(at, token, q[static_cast<std::size_t>(token)]);
    drafted_.push_back(token);
    if (token == map_->draft().eos()) ended_ = true;
  }

  // Appends to the proposals the target's encoding of the draft text after
  // them (step 2 of the file comment).
  void update_proposals() {
    std::string text;
    for (const TokenId d : drafted_) text.append(map_->draft().bytes(d));
    const auto spelled = proposed_bytes_;
    auto end = text.size();
    if (!ended_) end = complete_utf8_end(text, spelled);
    fresh_.clear();
    if (end > spelled) map_->target().encode(std::string_view(text).substr(spelled, end - spelled), fresh_);
    if (hold_back_ && !ended_ && !fresh_.empty()) fresh_.pop_back();  // may be cut by the text's end
    for (const TokenId t : fresh_) {
      proposals_.push_back(t);
      proposed_bytes_ += map_->target().bytes(t).size();
    }
    if (ended_ && map_->target().eos() != kNoToken) proposals_.push_back(map_->target().eos());
  }

  // The end of the last complete UTF-8 character of text[from, ...): bytes
  // after it could begin a character the next draft token completes.
  static std::size_t complete_utf8_end(std::string_view text, std::size_t from) {
    auto end = text.size();
    for (std::size_t back = 1; back <= 3 && back <= end - from; ++back) {
      const auto b = static_cast<unsigned char>(text[end - back]);
      if ((b & 0xC0) == 0x80) continue;  // a continuation byte: look further back
      if (b >= 0xC0 && tokenizer::detail::utf8_lead_len(b) > back)
        return end - back;  // a lead byte short of its tail
      break;
    }
    return end;
  }

  void reset_round() {
    drafted_.clear();
    proposals_.clear();
    proposed_bytes_ = 0;
    ended_ = exhausted_ = false;
    draft_rows_.clear();
  }

  Inner inner_;
  const VocabularyMap* map_;
  bool hold_back_ = false;
  bool greedy_ = true;
  RandomStream rng_;
  TokenId root_ = kNoToken, draft_root_ = kNoToken;
  DraftTree chain_;
  ProbMatrix draft_rows_;
  std::vector<TokenId> drafted_, proposals_, fresh_, draft_tokens_;
  std::size_t proposed_bytes_ = 0;
  bool ended_ = false;      // the draft wrote EOS
  bool exhausted_ = false;  // the draft's row was all zero
};

}  // namespace specdec
