// DraftTree: the token tree a round drafts and the target verifies in one
// forward (SpecInfer's token tree, arXiv 2305.09781, Definition 3.1).
//
// The root is implicit: it is the last committed token (usually the previous
// round's bonus token) and is fed to the target together with the nodes. Nodes
// are stored flat and topologically ordered (a parent always precedes its
// children); a chain is the tree whose parents are -1, 0, 1, ...
//
// Each "slot" — the root (parent index kRoot) or a node — whose children were
// drafted records where they came from: the row of the draft-probability
// matrix they were drawn from and how (ChildMode). The acceptance rules need
// exactly that to stay lossless (modes (a)–(c) of docs/methods.md).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <queue>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/bit_matrix.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"

namespace specdec {

// How the children of one slot were chosen from their draft distribution q.
enum class ChildMode : std::uint8_t {
  kNone,                       // no children drafted here
  kSampledWithReplacement,     // i.i.d. draws from q (SpecInfer MSS, mode (a))
  kSampledWithoutReplacement,  // draws without replacement (Sequoia, mode (b))
  kDeterministic,              // chosen without randomness, e.g. top-k (mode (c))
};

struct DraftNode {
  TokenId token = kNoToken;
  std::int32_t parent = -1;  // -1: child of the root
  std::int32_t depth = 0;    // 1 for children of the root
  float draft_prob = 0.0f;   // q(token) under the distribution it was drafted from
  double cum_logprob = 0.0;  // sum of log draft_prob along the root path (EAGLE-2 value)
};

class DraftTree {
 public:
  static constexpr std::int32_t kRoot = -1;

  explicit DraftTree(TokenId root_token = kNoToken) { clear(root_token); }

  // Empties the tree, keeping capacity (a decoder reuses one tree per round).
  void clear(TokenId root_token) {
    root_token_ = root_token;
    nodes_.clear();
    first_child_.assign(1, -1);
    last_child_.assign(1, -1);
    next_sibling_.clear();
    num_children_.assign(1, 0);
    child_row_.assign(1, -1);
    child_mode_.assign(1, ChildMode::kNone);
  }

  // Builds a tree from parallel arrays; parents[i] must be in [-1, i).
  static DraftTree from_parents(TokenId root_token, std::span<const TokenId> tokens,
                                std::span<const std::int32_t> parents,
                                std::span<const float> draft_probs) {
    if (tokens.size() != parents.size() || tokens.size() != draft_probs.size())
      throw ShapeError(fmt::format(
          "DraftTree::from_parents: {} tokens, {} parents and {} draft probabilities disagree",
          tokens.size(), parents.size(), draft_probs.size()));
    DraftTree t(root_token);
    for (std::size_t i = 0; i < tokens.size(); ++i) t.add_node(parents[i], tokens[i], draft_probs[i]);
    return t;
  }

  // Appends a child of `parent` (kRoot or an existing node) and returns its
  // index. draft_prob must be in [0, 1].
  std::int32_t add_node(std::int32_t parent, TokenId token, float draft_prob) {
    const auto index = size();
    if (parent < kRoot || parent >= index)
      throw InvalidTreeError(fmt::format(
          "DraftTree: parent index {} of node {} is not earlier than the node (nor the root, -1)",
          parent, index));
    if (token < 0)
      throw InvalidTreeError(fmt::format("DraftTree: node {} has negative token id {}", index, token));
    if (!(draft_prob >= 0.0f && draft_prob <= 1.0f))
      throw InvalidDistributionError(fmt::format(
          "DraftTree: draft probability of node {} must be in [0, 1], got {}", index, draft_prob));
    DraftNode n;
    n.token = token;
    n.parent = parent;
    n.depth = parent == kRoot ? 1 : nodes_[parent].depth + 1;
    n.draft_prob = draft_prob;
    n.cum_logprob = (parent == kRoot ? 0.0 : nodes_[parent].cum_logprob) +
                    std::log(static_cast<double>(draft_prob));
    nodes_.push_back(n);
    next_sibling_.push_back(-1);
    first_child_.push_back(-1);
    last_child_.push_back(-1);
    num_children_.push_back(0);
    child_row_.push_back(-1);
    child_mode_.push_back(ChildMode::kNone);
    const auto s = slot(parent);
    if (last_child_[s] < 0)
      first_child_[s] = index;
    else
      next_sibling_[last_child_[s]] = index;
    last_child_[s] = index;
    ++num_children_[s];
    return index;
  }

  // Records that the children of `parent` were drafted from row `draft_row` of
  // the draft-probability matrix, in the given mode.
  void set_children_source(std::int32_t parent, std::int32_t draft_row, ChildMode mode) {
    check_slot(parent);
    if (draft_row < -1)
      throw InvalidTreeError(fmt::format("DraftTree: draft row {} of slot {} is negative",
                                         draft_row, parent));
    child_row_[slot(parent)] = draft_row;
    child_mode_[slot(parent)] = mode;
  }

  TokenId root_token() const { return root_token_; }
  std::int32_t size() const { return static_cast<std::int32_t>(nodes_.size()); }
  bool empty() const { return nodes_.empty(); }
  const DraftNode& node(std::int32_t i) const {
    check_node(i);
    return nodes_[static_cast<std::size_t>(i)];
  }
  std::span<const DraftNode> nodes() const { return nodes_; }
  TokenId token(std::int32_t i) const { return node(i).token; }
  std::int32_t parent(std::int32_t i) const { return node(i).parent; }
  std::int32_t depth(std::int32_t i) const { return node(i).depth; }

  std::int32_t max_depth() const {
    std::int32_t d = 0;
    for (const auto& n : nodes_) d = std::max(d, n.depth);
    return d;
  }

  // Children of a slot, in insertion (sibling) order: first_child / next_sibling
  // lists, the encoding SGLang's verify kernels walk.
  std::int32_t first_child(std::int32_t parent) const { return first_child_[checked_slot(parent)]; }
  std::int32_t next_sibling(std::int32_t node_index) const {
    check_node(node_index);
    return next_sibling_[static_cast<std::size_t>(node_index)];
  }
  std::int32_t num_children(std::int32_t parent) const { return num_children_[checked_slot(parent)]; }
  std::vector<std::int32_t> children(std::int32_t parent) const {
    std::vector<std::int32_t> out;
    for (auto c = first_child(parent); c >= 0; c = next_sibling(c)) out.push_back(c);
    return out;
  }
  // The child of `parent` holding `token`, or -1 (first one if duplicated).
  std::int32_t find_child(std::int32_t parent, TokenId token) const {
    for (auto c = first_child(parent); c >= 0; c = next_sibling(c))
      if (nodes_[c].token == token) return c;
    return -1;
  }
  std::int32_t children_draft_row(std::int32_t parent) const { return child_row_[checked_slot(parent)]; }
  ChildMode children_mode(std::int32_t parent) const { return child_mode_[checked_slot(parent)]; }

  bool is_chain() const {
    for (std::int32_t i = 0; i < size(); ++i)
      if (nodes_[i].parent != i - 1) return false;
    return true;
  }

  // Attention mask among the verification inputs. With the root included, the
  // inputs are [root, node 0, ..., node N-1] and row/column 0 is the root,
  // which every node sees; otherwise rows are the nodes alone. Bit (i, j) is
  // set iff j is i or one of its ancestors (SpecInfer's topology-aware mask).
  BitMatrix ancestor_mask(bool include_root = true) const {
    const std::int32_t off = include_root ? 1 : 0;
    BitMatrix m(size() + off);
    if (include_root) m.set(0, 0);
    for (std::int32_t i = 0; i < size(); ++i) {
      const auto p = nodes_[i].parent;
      if (p != kRoot) {  // a row inherits its parent's row (parents come first)
        const auto src = m.row(p + off);
        const auto dst = m.row(i + off);
        std::copy(src.begin(), src.end(), dst.begin());
      } else if (include_root) {
        m.set(i + off, 0);
      }
      m.set(i + off, i + off);
    }
    return m;
  }

  // Position ids of the nodes: root_position + depth (docs/methods.md, token
  // trees), where root_position is the root token's own position (the
  // committed length).
  std::vector<std::int64_t> positions(std::int64_t root_position) const {
    std::vector<std::int64_t> out(nodes_.size());
    for (std::size_t i = 0; i < nodes_.size(); ++i) out[i] = root_position + nodes_[i].depth;
    return out;
  }

  // Node indices from the root's child down to `node_index` (root excluded).
  std::vector<std::int32_t> path_to(std::int32_t node_index) const {
    check_slot(node_index);
    if (node_index == kRoot) return {};
    std::vector<std::int32_t> path(static_cast<std::size_t>(nodes_[node_index].depth));
    for (auto i = node_index, k = static_cast<std::int32_t>(path.size()) - 1; i != kRoot;
         i = nodes_[i].parent, --k)
      path[static_cast<std::size_t>(k)] = i;
    return path;
  }

  // One root-to-leaf path per leaf, leaves in index order (Medusa's
  // retrieve_indices).
  std::vector<std::vector<std::int32_t>> leaf_paths() const {
    std::vector<std::vector<std::int32_t>> out;
    for (std::int32_t i = 0; i < size(); ++i)
      if (num_children_[slot(i)] == 0) out.push_back(path_to(i));
    return out;
  }

  std::vector<TokenId> tokens_of(std::span<const std::int32_t> path) const {
    std::vector<TokenId> out;
    out.reserve(path.size());
    for (auto i : path) out.push_back(node(i).token);
    return out;
  }

 private:
  static std::size_t slot(std::int32_t parent) { return static_cast<std::size_t>(parent + 1); }
  // A bad index is a caller's mistake: a typed error, not std::out_of_range.
  void check_node(std::int32_t i) const {
    if (i < 0 || i >= size())
      throw InvalidTreeError(
          fmt::format("DraftTree: node index {} out of range [0, {})", i, size()));
  }
  void check_slot(std::int32_t parent) const {
    if (parent < kRoot || parent >= size())
      throw InvalidTreeError(fmt::format("DraftTree: node index {} out of range [-1, {})", parent,
                                         size()));
  }
  std::size_t checked_slot(std::int32_t parent) const {
    check_slot(parent);
    return slot(parent);
  }

  TokenId root_token_ = kNoToken;
  std::vector<DraftNode> nodes_;
  // Indexed by slot (root = 0, node i = i + 1) except next_sibling_ (by node).
  std::vector<std::int32_t> first_child_, last_child_, next_sibling_, num_children_, child_row_;
  std::vector<ChildMode> child_mode_;
};

}  // namespace specdec
