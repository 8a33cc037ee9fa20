// DuoDecoding's one-iteration lag as a carry-over (Lv et al., arXiv
// 2503.00784, §3.1 and §3.3; docs/methods.md, DuoDecoding).
//
// Every round verifies the tail T drafted in the round before (a chain rooted
// at this round's root, possibly empty) while the drafter, concurrently,
// drafts k sequences below T's tip as if T were accepted (plan: kLagged; the
// builder's grow()). After the target's forward the rule verifies T:
//  - T rejected at some node: the rule emitted the correction there, and what
//    was drafted below the tip is stale (dropped; the drafter keeps only the
//    committed tokens). The next round starts with no tail.
//  - T accepted whole: the rule's bonus y is the target's own draw after T.
//    If y is the first token of a drafted sequence, that sequence was chosen:
//    its continuation is the next tail. Otherwise the next round has none.
// Matching y against the sequences' first tokens is the target-only rule for
// deterministic candidates (SpecInfer/Sequoia, mode (c) of docs/methods.md):
// y ~ p whatever was drafted, so the lag never changes the law. A chosen
// continuation was drawn by the drafter before y, so next round it is an
// ordinary draft verified by the ordinary rule.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

#include <fmt/format.h>

#include "specdec/concepts.hpp"
#include "specdec/core/error.hpp"
#include "specdec/engine/stats.hpp"

namespace specdec {

class LaggedTail {
 public:
  static constexpr bool kLags = true;

  struct State {
    DraftTree tail{};      // rooted at the next root; empty: none
    ProbMatrix rows;       // the draft rows the tail's sampled slots refer to
    std::int32_t planned = 0;  // tail nodes this round verifies
  };

  CarryPlan plan(State& s, TokenId root, std::int32_t room) {
    if (s.tail.size() > 0 && s.tail.root_token() != root)
      throw InvalidTreeError(
          fmt::format("LaggedTail: the tail's root {} is not this round's root {}", s.tail.root_token(), root));
    if (s.tail.size() == 0) s.tail.clear(root);
    if (s.tail.size() > room) truncate(s.tail, room);  // a shorter tail is still a draft from q
    s.planned = s.tail.size();
    return {CarryMode::kLagged, &s.tail, s.rows.view()};
  }

  template <class D>
  void after(State& s, D& /*drafter*/, const CarryRound& round, Stats& stats) {
    const DraftTree& drafted = *round.drafted;
    const VerifyResult& result = *round.result;
    const std::int32_t tip = s.planned - 1;  // kRoot when the tail was empty
    auto& lag = stats.lag;
    ++lag.rounds;
    lag.tail_nodes += s.planned;
    lag.tail_accepted += result.num_accepted();
    const std::int32_t sequences = tip < drafted.size() ? drafted.num_children(tip) : 0;
    s.tail.clear(round.next_root);
    s.rows.resize(0, round.draft_rows.vocab());
    if (result.num_accepted() < s.planned) {  // rejected inside the tail
      lag.stale += sequences > 0;
      return;
    }
    if (sequences == 0) return;
    ++lag.tips;
    lag.sequences_drafted += sequences;
    const bool top1_right = drafted.token(drafted.first_child(tip)) == round.next_root;
    ++lag.top1_confusion[top1_right ? 0 : 1][sequences == 1 ? 0 : 1];
    const std::int32_t chosen = drafted.find_child(tip, round.next_root);
    if (chosen < 0 || round.room <= 0) return;
    ++lag.chosen;
    // The chosen sequence's continuation, re-rooted at its first token: each
    // node's first child (a sequence is a chain; a lone first draw from q,
    // with or without replacement, is still a draw from q).
    std::int32_t parent = DraftTree::kRoot;
    for (auto v = chosen; drafted.first_child(v) >= 0 && s.tail.size() < round.room;) {
      const auto c = drafted.first_child(v);
      const auto row = drafted.children_draft_row(v);
      std::int32_t copied = -1;
      if (row >= 0) {
        copied = static_cast<std::int32_t>(s.rows.num_rows());
        const auto from = round.draft_rows.row(row);
        const auto to = s.rows.append_row();
        std::copy(from.begin(), from.end(), to.begin());
      }
      s.tail.set_children_source(parent, copied, drafted.children_mode(v));
      parent = s.tail.add_node(parent, drafted.token(c), drafted.node(c).draft_prob);
      v = c;
    }
  }

 private:
  // Keeps the first n nodes of a chain and the sources of their slots.
  static void truncate(DraftTree& chain, std::int32_t n) {
    DraftTree kept(chain.root_token());
    for (std::int32_t i = 0; i < n; ++i) {
      kept.set_children_source(i - 1, chain.children_draft_row(i - 1), chain.children_mode(i - 1));
      kept.add_node(i - 1, chain.token(i), chain.node(i).draft_prob);
    }
    chain = std::move(kept);
  }
};

}  // namespace specdec
