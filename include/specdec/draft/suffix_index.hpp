// The suffix index of SuffixDecoding (Oliaro et al., arXiv 2411.04975, §3.1
// and §3.2): every substring of up to `max_depth` tokens of the sequences it
// holds, in a trie whose node for a substring counts its occurrences. A
// sequence grows a token at a time; the new token extends every suffix of
// the sequence that ended one token earlier, so an append costs O(max_depth)
// whatever the length (the paper's suffix tree gives the same queries; the
// depth bound is what makes the trie's size linear: at most max_depth nodes
// per token held). A sequence can be removed again (its occurrences
// uncounted, nodes left without any freed), which is how the global index
// evicts old requests.
//
// Speculation from a pattern (the context's last tokens): find the longest
// suffix of the pattern that occurs in the index (its length p, the match
// length), then grow a speculation tree below that node, best first by the
// estimated probability of each path, D(child) = D(node) * C(child) / C(node)
// (C: occurrence counts; §3.2), keeping at most min(max_tokens, factor * p)
// nodes and none whose D is below min_prob. The draft's score is the sum of
// its nodes' D: the expected number of accepted tokens if the estimates were
// right, which decides between the request's own index and the global one.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <queue>
#include <span>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"

namespace specdec {

// A speculation: tokens in a tree (parents[i] < i, -1 below the matched
// context), each with its estimated probability D.
struct SuffixDraft {
  std::vector<TokenId> tokens;
  std::vector<std::int32_t> parents;
  std::vector<float> probs;
  double score = 0.0;          // sum of probs
  std::int32_t match_len = 0;  // tokens of the pattern matched
};

struct SuffixSpeculation {
  std::int32_t max_tokens = 16;  // nodes in the tree at most
  double factor = 1.0;           // and at most factor * match length (the paper's MAX_SPEC = alpha * p)
  float min_prob = 0.1f;         // no node whose estimated probability is lower
  bool tree = true;              // false: the single most likely path

  void validate() const {
    if (max_tokens < 0 || !(factor >= 0.0) || !(min_prob >= 0.0f && min_prob <= 1.0f))
      throw InvalidArgumentError(fmt::format(
          "SuffixSpeculation: max_tokens ({}) and factor ({}) must be >= 0, min_prob ({}) in [0, 1]",
          max_tokens, factor, min_prob));
  }
};

class SuffixIndex {
 public:
  explicit SuffixIndex(std::int32_t max_depth = 32) : max_depth_(max_depth) {
    if (max_depth < 2 || max_depth > 1024)
      throw InvalidArgumentError(
          fmt::format("SuffixIndex: max_depth must be in [2, 1024], got {}", max_depth));
    nodes_.emplace_back();  // the root: the empty string
  }

  std::int32_t max_depth() const { return max_depth_; }
  // Live nodes (the root included), and the memory they and the held
  // sequences take, for the reports.
  std::int64_t num_nodes() const { return static_cast<std::int64_t>(nodes_.size() - free_.size()); }
  std::int64_t num_tokens() const { return tokens_held_; }
  std::int64_t bytes() const {
    // The nodes, and the edge map's entries (a key, a value, a next pointer,
    // a cached hash) and buckets.
    std::int64_t b = static_cast<std::int64_t>(nodes_.capacity() * sizeof(Node) +
                                               edges_.size() * (sizeof(std::uint64_t) + 3 * sizeof(void*)) +
                                               edges_.bucket_count() * sizeof(void*));
    for (const auto& [id, s] : sequences_)
      b += static_cast<std::int64_t>((s.tokens.capacity() + s.active.capacity()) * sizeof(std::int32_t));
    return b;
  }
  bool holds(std::int32_t seq) const { return sequences_.contains(seq); }
  std::int64_t num_sequences() const { return static_cast<std::int64_t>(sequences_.size()); }

  // Appends tokens to sequence `seq` (started by the first append).
  void extend(std::int32_t seq, std::span<const TokenId> tokens) {
    Sequence& s = sequences_[seq];
    for (const TokenId t : tokens) {
      if (t < 0) throw InvalidArgumentError(fmt::format("SuffixIndex: negative token {}", t));
      s.tokens.push_back(t);
      ++tokens_held_;
      // The suffixes ending at t: t alone, then each suffix that ended at the
      // previous token, one longer, while shorter than max_depth.
      next_active_.clear();
      next_active_.push_back(child_or_new(0, t));
      for (const std::int32_t n : s.active)
        if (nodes_[static_cast<std::size_t>(n)].depth < max_depth_)
          next_active_.push_back(child_or_new(n, t));
      for (const std::int32_t n : next_active_) ++nodes_[static_cast<std::size_t>(n)].count;
      s.active.swap(next_active_);
    }
  }

  // Uncounts every occurrence sequence `seq` added; nodes left with none are
  // freed. InvalidArgumentError when the index does not hold it.
  void remove(std::int32_t seq) {
    const auto it = sequences_.find(seq);
    if (it == sequences_.end())
      throw InvalidArgumentError(fmt::format("SuffixIndex: no sequence {} to remove", seq));
    const std::vector<TokenId>& tokens = it->second.tokens;
    // Replay the appends backwards: the substring tokens[j..i] was counted
    // once, at i, and its extensions (ending later) are uncounted first, so a
    // node's count reaches zero only after its children's did.
    for (std::size_t i = tokens.size(); i-- > 0;) {
      const std::size_t first = i + 1 >= static_cast<std::size_t>(max_depth_) ? i + 1 - max_depth_ : 0;
      for (std::size_t j = first; j <= i; ++j) {
        std::int32_t n = 0;
        for (std::size_t k = j; k <= i; ++k) n = child(n, tokens[k]);
        uncount(n);
      }
    }
    tokens_held_ -= static_cast<std::int64_t>(tokens.size());
    sequences_.erase(it);
  }

  // The longest suffix of `pattern` that occurs with a continuation (some
  // occurrence is followed by a token): (its node, its length); the root and
  // 0 when none does. A context always occurs in its own request's index,
  // at the end, where nothing follows it yet: that occurrence predicts
  // nothing.
  std::pair<std::int32_t, std::int32_t> match(std::span<const TokenId> pattern) const {
    // Binary search on the length: when a suffix occurs with a continuation,
    // so does each shorter one (at the same place), so O(depth log depth)
    // lookups find the longest, not O(depth^2).
    std::int32_t lo = 0, best = 0;  // a length known to match (0: none), its node
    auto hi = static_cast<std::int32_t>(
        std::min<std::size_t>(pattern.size(), static_cast<std::size_t>(max_depth_ - 1)));
    while (lo < hi) {
      const std::int32_t len = lo + (hi - lo + 1) / 2;
      std::int32_t n = 0;
      for (std::size_t k = pattern.size() - static_cast<std::size_t>(len); k < pattern.size() && n >= 0; ++k)
        n = child(n, pattern[k]);
      if (n > 0 && nodes_[static_cast<std::size_t>(n)].first_child >= 0) {
        lo = len;
        best = n;
      } else {
        hi = len - 1;
      }
    }
    return {best, lo};
  }

  // The continuations of `pattern`'s longest match, with their estimated
  // probabilities C(child) / C(match); empty when nothing matches.
  std::vector<std::pair<TokenId, float>> continuations(std::span<const TokenId> pattern) const {
    std::vector<std::pair<TokenId, float>> out;
    const auto [n, len] = match(pattern);
    if (len == 0) return out;
    const Node& node = nodes_[static_cast<std::size_t>(n)];
    for (std::int32_t c = node.first_child; c >= 0; c = nodes_[static_cast<std::size_t>(c)].next_sibling)
      out.emplace_back(nodes_[static_cast<std::size_t>(c)].token,
                       static_cast<float>(static_cast<double>(nodes_[static_cast<std::size_t>(c)].count) /
                                          static_cast<double>(node.count)));
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    return out;
  }

  // The speculation tree below `pattern`'s longest match (see the top).
  // Siblings come in decreasing probability, ties to the lower token.
  SuffixDraft speculate(std::span<const TokenId> pattern, const SuffixSpeculation& o) const {
    o.validate();
    SuffixDraft d;
    const auto [start, len] = match(pattern);
    d.match_len = len;
    const auto limit = static_cast<std::int32_t>(
        std::min<double>(o.max_tokens, std::floor(o.factor * static_cast<double>(len))));
    if (len == 0 || limit <= 0) return d;
    // Best first: a candidate is (D, index node, parent in the draft).
    struct Candidate {
      double prob;
      std::int32_t node, parent;
      TokenId token;
      bool operator<(const Candidate& c) const {
        return prob != c.prob ? prob < c.prob : token > c.token;  // max-heap: highest D, then lowest token
      }
    };
    std::priority_queue<Candidate> heap;
    const auto push_children = [&](std::int32_t n, double prob, std::int32_t parent) {
      const Node& node = nodes_[static_cast<std::size_t>(n)];
      for (std::int32_t c = node.first_child; c >= 0; c = nodes_[static_cast<std::size_t>(c)].next_sibling) {
        const TokenId t = nodes_[static_cast<std::size_t>(c)].token;
        const double p = prob * static_cast<double>(nodes_[static_cast<std::size_t>(c)].count) /
                         static_cast<double>(node.count);
        if (p >= o.min_prob) heap.push({p, c, parent, t});
      }
    };
    push_children(start, 1.0, -1);
    while (!heap.empty() && static_cast<std::int32_t>(d.tokens.size()) < limit) {
      const Candidate c = heap.top();
      heap.pop();
      const auto index = static_cast<std::int32_t>(d.tokens.size());
      d.tokens.push_back(c.token);
      d.parents.push_back(c.parent);
      d.probs.push_back(static_cast<float>(c.prob));
      d.score += c.prob;
      if (!o.tree) heap = {};  // a path: only this node's children compete next
      push_children(c.node, c.prob, index);
    }
    return d;
  }

 private:
  // 24 bytes; a node's children are a sibling list, found by token through
  // one hash map of edges for the whole index (a map per node cost ten times
  // the memory).
  struct Node {
    std::int32_t count = 0;
    std::int32_t parent = -1;
    std::int32_t first_child = -1, next_sibling = -1;
    TokenId token = kNoToken;
    std::int32_t depth = 0;
  };
  struct Sequence {
    std::vector<TokenId> tokens;
    std::vector<std::int32_t> active;  // the nodes of its suffixes ending at its last token
  };

  static std::uint64_t edge(std::int32_t n, TokenId t) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(n)) << 32) | static_cast<std::uint32_t>(t);
  }

  std::int32_t child(std::int32_t n, TokenId t) const {
    const auto it = edges_.find(edge(n, t));
    return it == edges_.end() ? -1 : it->second;
  }

  std::int32_t child_or_new(std::int32_t n, TokenId t) {
    const auto [it, added] = edges_.try_emplace(edge(n, t), -1);
    if (!added) return it->second;
    std::int32_t c;
    if (!free_.empty()) {
      c = free_.back();
      free_.pop_back();
    } else {
      c = static_cast<std::int32_t>(nodes_.size());
      nodes_.emplace_back();
    }
    Node& node = nodes_[static_cast<std::size_t>(c)];
    Node& parent = nodes_[static_cast<std::size_t>(n)];
    node = Node{0, n, -1, parent.first_child, t, parent.depth + 1};
    parent.first_child = c;
    it->second = c;
    return c;
  }

  void uncount(std::int32_t n) {
    Node& node = nodes_[static_cast<std::size_t>(n)];
    if (--node.count > 0) return;
    // No occurrence left, so none of its extensions has one either: they were
    // freed first (an extension's occurrences are the node's).
    edges_.erase(edge(node.parent, node.token));
    std::int32_t* link = &nodes_[static_cast<std::size_t>(node.parent)].first_child;
    while (*link != n) link = &nodes_[static_cast<std::size_t>(*link)].next_sibling;
    *link = node.next_sibling;
    free_.push_back(n);
  }

  std::int32_t max_depth_;
  std::vector<Node> nodes_;
  std::unordered_map<std::uint64_t, std::int32_t> edges_;  // (node, token) -> child
  std::vector<std::int32_t> free_;
  std::unordered_map<std::int32_t, Sequence> sequences_;
  std::vector<std::int32_t> next_active_;
  std::int64_t tokens_held_ = 0;
};

}  // namespace specdec
