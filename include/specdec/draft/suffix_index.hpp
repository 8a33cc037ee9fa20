// The suffix index of SuffixDecoding (Oliaro et al., arXiv 2411.04975, §3.1
// and §3.2): every substring of up to `max_depth` tokens of the sequences it
// holds, in a trie whose node for a substring counts its occurrences. A
// sequence grows a token at a time; the new token extends every suffix of
// the sequence that ended one token earlier, so an append costs O(max_depth)
// whatever the length (the paper's suffix tree gives the same queries; the
// depth bound is what makes the trie's size linear: at most max_depth nodes
// per token held). A sequence can be removed again (its occurrences
// uncounted, nodes left without any freed, O(max_depth) a token as its
// appends), which is how the global index evicts old requests.
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
#include <bit>
#include <cmath>
#include <cstdint>
#include <queue>
#include <span>
#include <unordered_map>
#include <utility>
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
    std::int64_t b = static_cast<std::int64_t>(nodes_.capacity() * sizeof(Node) + edges_.bytes());
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
      // The lookups below are independent: ask for all their slots first, so
      // that the cache misses of a large index overlap instead of queueing.
      for (const std::int32_t n : s.active) edges_.prefetch(EdgeTable::key(n, t));
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
    // Replay the appends: the suffixes ending at each token are found from
    // those ending one token earlier, as extend() found them, and uncounted.
    // A node left without occurrences has no extension with any (an
    // extension's occurrences are its own), so freeing them all once every
    // count is down leaves no live node below a freed one.
    std::vector<std::int32_t> active, dead;
    for (const TokenId t : it->second.tokens) {
      next_active_.clear();
      next_active_.push_back(child(0, t));
      for (const std::int32_t n : active)
        if (nodes_[static_cast<std::size_t>(n)].depth < max_depth_) next_active_.push_back(child(n, t));
      for (const std::int32_t n : next_active_)
        if (--nodes_[static_cast<std::size_t>(n)].count == 0) dead.push_back(n);
      active.swap(next_active_);
    }
    for (const std::int32_t n : dead) free_node(n);
    tokens_held_ -= static_cast<std::int64_t>(it->second.tokens.size());
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
  // 28 bytes; a node's children are a doubly linked sibling list (freed in
  // O(1), where the root has a child per distinct token), found by token
  // through one table of edges for the whole index (a map per node cost ten
  // times the memory).
  struct Node {
    std::int32_t count = 0;
    std::int32_t parent = -1;
    std::int32_t first_child = -1, next_sibling = -1, prev_sibling = -1;
    TokenId token = kNoToken;
    std::int32_t depth = 0;
  };
  struct Sequence {
    std::vector<TokenId> tokens;
    std::vector<std::int32_t> active;  // the nodes of its suffixes ending at its last token
  };

  // (node, token) -> child: open addressing with linear probing, at most half
  // full, deletion by backward shift (no tombstones). It replaced a
  // std::unordered_map, an allocation and a pointer chase per edge: appends
  // to a large index and speculation now cost half, an eviction a
  // fourteenth (docs/RESULTS.md, "An open-addressed edge table").
  class EdgeTable {
   public:
    static std::uint64_t key(std::int32_t n, TokenId t) {
      return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(n)) << 32) |
             static_cast<std::uint32_t>(t);
    }
    std::int32_t find(std::uint64_t k) const {
      if (slots_.empty()) return -1;
      for (std::size_t i = home(k);; i = (i + 1) & mask_) {
        if (slots_[i].key == k) return slots_[i].value;
        if (slots_[i].key == kEmpty) return -1;
      }
    }
    // The value slot of k, and whether it was added (then holding -1).
    std::pair<std::int32_t*, bool> find_or_add(std::uint64_t k) {
      if (2 * (size_ + 1) > slots_.size()) rehash(std::max<std::size_t>(64, 2 * slots_.size()));
      for (std::size_t i = home(k);; i = (i + 1) & mask_) {
        Slot& s = slots_[i];
        if (s.key == k) return {&s.value, false};
        if (s.key == kEmpty) {
          s = Slot{k, -1};
          ++size_;
          return {&s.value, true};
        }
      }
    }
    void erase(std::uint64_t k) {
      std::size_t hole = home(k);
      while (slots_[hole].key != k) {
        if (slots_[hole].key == kEmpty) return;
        hole = (hole + 1) & mask_;
      }
      // Close the hole: a later entry of the run moves into it unless its
      // home lies after the hole (it would then be found before its home).
      for (std::size_t j = (hole + 1) & mask_; slots_[j].key != kEmpty; j = (j + 1) & mask_)
        if (((j - home(slots_[j].key)) & mask_) >= ((j - hole) & mask_)) {
          slots_[hole] = slots_[j];
          hole = j;
        }
      slots_[hole].key = kEmpty;
      --size_;
    }
    std::size_t bytes() const { return slots_.capacity() * sizeof(Slot); }
    void prefetch(std::uint64_t k) const {
      if (!slots_.empty()) __builtin_prefetch(&slots_[home(k)]);
    }

   private:
    static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};  // no (node, token) has both halves all ones
    struct Slot {
      std::uint64_t key = kEmpty;
      std::int32_t value = -1;
    };
    // Fibonacci hashing: the product's top bits mix the node and the token.
    std::size_t home(std::uint64_t k) const {
      return static_cast<std::size_t>((k * 0x9E3779B97F4A7C15ull) >> shift_);
    }
    void rehash(std::size_t capacity) {
      std::vector<Slot> old(capacity);
      old.swap(slots_);
      mask_ = capacity - 1;
      shift_ = 64 - std::countr_zero(capacity);
      for (const Slot& s : old)
        if (s.key != kEmpty) {
          std::size_t i = home(s.key);
          while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
          slots_[i] = s;
        }
    }
    std::vector<Slot> slots_;  // a power of two of them
    std::size_t mask_ = 0, size_ = 0;
    int shift_ = 64;
  };

  std::int32_t child(std::int32_t n, TokenId t) const { return edges_.find(EdgeTable::key(n, t)); }

  std::int32_t child_or_new(std::int32_t n, TokenId t) {
    const auto [value, added] = edges_.find_or_add(EdgeTable::key(n, t));
    if (!added) return *value;
    std::int32_t c;
    if (!free_.empty()) {
      c = free_.back();
      free_.pop_back();
    } else {
      c = static_cast<std::int32_t>(nodes_.size());
      nodes_.emplace_back();
    }
    Node& parent = nodes_[static_cast<std::size_t>(n)];
    if (parent.first_child >= 0) nodes_[static_cast<std::size_t>(parent.first_child)].prev_sibling = c;
    nodes_[static_cast<std::size_t>(c)] = Node{0, n, -1, parent.first_child, -1, t, parent.depth + 1};
    parent.first_child = c;
    *value = c;
    return c;
  }

  void free_node(std::int32_t n) {
    const Node& node = nodes_[static_cast<std::size_t>(n)];
    edges_.erase(EdgeTable::key(node.parent, node.token));
    if (node.prev_sibling >= 0)
      nodes_[static_cast<std::size_t>(node.prev_sibling)].next_sibling = node.next_sibling;
    else
      nodes_[static_cast<std::size_t>(node.parent)].first_child = node.next_sibling;
    if (node.next_sibling >= 0)
      nodes_[static_cast<std::size_t>(node.next_sibling)].prev_sibling = node.prev_sibling;
    free_.push_back(n);
  }

  std::int32_t max_depth_;
  std::vector<Node> nodes_;
  EdgeTable edges_;
  std::vector<std::int32_t> free_;
  std::unordered_map<std::int32_t, Sequence> sequences_;
  std::vector<std::int32_t> next_active_;
  std::int64_t tokens_held_ = 0;
};

}  // namespace specdec
