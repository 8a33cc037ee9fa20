// Per-row math of the sequence-level rules, block verification (chains) and
// traversal verification (trees), shared by the host rules and the CUDA
// kernels in cuda/ (SPECDEC_HOST_DEVICE) like row_math.hpp's chain math.
//
// Both rules keep, for every node on the way, a sequence weight p (the chance
// that the path to the node survives) and the law b the node must emit from
// if it does (docs/acceptance.md, "Block and traversal verification"):
//   child:      p_c = min(1, p * b(x) / s(x))           x ~ s, the node's draft law
//   rejected:   Z   = sum_y max(p * b(y) - s(y), 0)
//               b  <- norm(max(p * b - s, 0)),  p <- Z / (Z + 1 - p)
//               (without replacement, also s <- s without x, renormalised)
//   no child left: the node holds with probability p, and then emits from b.
// A deterministic child set has s = one-hot at the child's token. On a chain
// this is block verification (Sun et al., arXiv 2403.10444, Algorithm 2):
// p <- Z / (Z + 1 - p) is its h_i, and the residual its correction. Written so
// that traversal on a chain repeats block verification's arithmetic exactly:
// both emit the same tokens from the same uniforms.
//
// Uniforms: node i's test reads uniforms[i] (on a chain, x_{i+1}'s block ends
// there: eta_{i+1}), the emitted token uniforms[n] (n = the tree's nodes), so
// a row consumes n + 1 whatever happens and batch rows stay independent.
#pragma once

#include <cstdint>

#include "specdec/accept/row_math.hpp"
#include "specdec/core/row_kernels.hpp"
#include "specdec/core/macros.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/types.hpp"

namespace specdec::row_math {

// min(1, p * b(x) / s(x)); 0 when s(x) is 0 (such a token cannot have been
// drawn; the host rules refuse it before calling).
SPECDEC_HOST_DEVICE double child_weight(double p, double b_x, double s_x) {
  if (!(s_x > 0.0)) return 0.0;
  const double w = p * b_x / s_x;
  return w < 1.0 ? w : 1.0;
}

// max(p * b(y) - s(y), 0): the mass a node still owes token y after a child
// drawn from s was rejected.
SPECDEC_HOST_DEVICE double residual_weight(double p, double b_y, double s_y) {
  const double d = p * b_y - s_y;
  return d > 0.0 ? d : 0.0;
}

// The node's new weight after a rejected child: Z / (Z + 1 - p) (block
// verification's h_i). Z + 1 - p = 0 (p = 1 and b = s) cannot meet a
// rejection in exact arithmetic; the node then keeps weight 1.
SPECDEC_HOST_DEVICE double weight_after_rejection(double p, double z) {
  const double d = z + (1.0 - p);
  return d > 0.0 ? z / d : 1.0;
}

// A row's mass in double, summed in bitexact::lane_sum's shape (a CUDA block
// of 1024 threads sums it to the same bits).
SPECDEC_HOST_DEVICE double row_mass(const float* row, std::int64_t vocab) {
#if defined(__CUDA_ARCH__)
  return bitexact::lane_sum(row, vocab);
#else
  return row_kernels::lane_sum(row, vocab);  // the same sum, vectorized
#endif
}

// Z = sum_y max(p * b(y) - q(y), 0) for a target row b and a draft row q.
// Summed in bitexact::lane_sum's shape, like row_mass.
SPECDEC_HOST_DEVICE double sampled_residual_mass(double p, const float* b, const float* q,
                                                 std::int64_t vocab) {
  return bitexact::lane_sum_of(
      [p, b, q](std::int64_t y) { return residual_weight(p, static_cast<double>(b[y]), static_cast<double>(q[y])); },
      vocab);
}

// The same for a one-hot draft at x, in O(1): with b = row / total over the
// tokens not yet removed, of unnormalised mass `remaining`, max(p b - 1, 0)
// vanishes (p b(x) <= 1) and Z = p (remaining - row(x)) / total; the residual
// is the row without x, its new total remaining - row(x).
SPECDEC_HOST_DEVICE double onehot_residual_mass(double p, double remaining, double row_x, double total) {
  return p * (remaining - row_x) / total;
}

// Draw from `row` without the tokens `next_excluded` enumerates, with uniform
// u: next_excluded(y) is the smallest excluded token above y (or >= vocab).
// The exact fixed-point sum of what is left (sample_weights); kNoToken when nothing is.
template <class NextExcluded>
SPECDEC_HOST_DEVICE TokenId sample_excluding(const float* row, std::int64_t vocab, double u,
                                             NextExcluded next_excluded) {
  std::uint64_t total = 0;
  std::int64_t skip = next_excluded(-1);
  for (std::int64_t y = 0; y < vocab; ++y) {
    if (y == skip) {
      skip = next_excluded(y);
      continue;
    }
    total += bitexact::fixed_mass(static_cast<double>(row[y]));
  }
  if (total == 0) return kNoToken;
  const std::uint64_t t = draw_threshold(u, total);
  std::uint64_t acc = 0;
  skip = next_excluded(-1);
  for (std::int64_t y = 0; y < vocab; ++y) {
    if (y == skip) {
      skip = next_excluded(y);
      continue;
    }
    acc += bitexact::fixed_mass(static_cast<double>(row[y]));
    if (acc > t) return static_cast<TokenId>(y);
  }
  return kNoToken;  // unreachable: t < total
}

// ---- block verification (chains) -------------------------------------------

// p_i of a chain: p_0 = 1, p_i = min(1, p_{i-1} * b_{i-1}(x_i) / s_{i-1}(x_i)).
template <class DraftRows, class TargetRows>
SPECDEC_HOST_DEVICE double block_weight(DraftRows draft_row, const TokenId* tokens, TargetRows target_row,
                                        std::int32_t i) {
  double p = 1.0;
  for (std::int32_t j = 0; j < i && p > 0.0; ++j) {
    const TokenId x = tokens[j];
    const float* q = draft_row(j);
    p = child_weight(p, static_cast<double>(target_row(j)[x]),
                     q != nullptr ? static_cast<double>(q[x]) : 1.0);
  }
  return p;
}

// Block verification of one chain (Sun et al., arXiv 2403.10444, Algorithm 2;
// the arguments as for chain_speculative_sampling_row). Lossless.
//   h_gamma = p_gamma;  h_i = Z_i / (Z_i + 1 - p_i) for i < gamma
//   tau = max{i : eta_i < h_i} (0 if none), eta_i = uniforms[i - 1]
//   emitted: tau < gamma: a draw from norm(max(p_tau * b_tau - s_tau, 0)),
//            tau = gamma: the bonus from b_gamma; uniform uniforms[gamma].
// The tests run from the last draft back and stop at the first success, so
// the work is O(gamma^2 + (gamma - tau) * vocab).
template <class DraftRows, class TargetRows>
SPECDEC_HOST_DEVICE std::int32_t block_verification_row(DraftRows draft_row, const TokenId* tokens,
                                                        TargetRows target_row, std::int32_t gamma,
                                                        std::int64_t vocab, PhiloxUniforms uniforms,
                                                        TokenId* out) {
  std::int32_t tau = 0;
  double p_tau = 1.0;
  for (std::int32_t i = gamma; i >= 1; --i) {
    const double p = block_weight(draft_row, tokens, target_row, i);
    if (!(p > 0.0)) continue;  // h_i = 0: Z_i is 0 too
    double h = p;
    if (i < gamma) {
      const float* b = target_row(i);
      const float* q = draft_row(i);
      const double z =
          q != nullptr ? sampled_residual_mass(p, b, q, vocab)
                       : onehot_residual_mass(p, row_mass(b, vocab), static_cast<double>(b[tokens[i]]), 1.0);
      h = weight_after_rejection(p, z);
    }
    if (uniforms[static_cast<std::uint64_t>(i - 1)] < h) {
      tau = i;
      p_tau = p;
      break;
    }
  }
  for (std::int32_t i = 0; i < tau; ++i) out[i] = tokens[i];
  const double u = uniforms[static_cast<std::uint64_t>(gamma)];
  TokenId y = kNoToken;
  if (tau < gamma) {
    const float* b = target_row(tau);
    const float* q = draft_row(tau);
    const TokenId x = tokens[tau];
    if (q != nullptr)
      y = sample_weights(
          [&](std::int64_t k) {
            return residual_weight(p_tau, static_cast<double>(b[k]), static_cast<double>(q[k]));
          },
          vocab, u);
    else  // b without x
      y = sample_excluding(b, vocab, u,
                           [x, vocab](std::int64_t k) { return x > k ? std::int64_t{x} : vocab; });
  }
  // The bonus; or, if rounding left the residual empty (Z = 0, where a block
  // cannot end in exact arithmetic), the target row itself.
  if (y == kNoToken) y = sample_row(target_row(tau), vocab, u);
  out[tau] = y;
  for (std::int32_t j = tau + 1; j <= gamma; ++j) out[j] = kNoToken;
  return tau;
}

// ---- traversal verification (trees) ----------------------------------------

// How a slot's children were drafted, for the row function (the host's
// ChildMode without kNone): one-hot (a deterministic choice), i.i.d. draws
// from the slot's draft row, or draws without replacement from it.
enum class SlotDraw : std::uint8_t { kOneHot = 0, kIid = 1, kWithoutReplacement = 2 };

// One level of the traversal's path (root = level 0): the node, the next
// child to visit, the node's weight p, and its laws b and s, each either the
// model's row as given (total 1) or scratch weights over `total`. A one-hot
// slot keeps no scratch: after a rejection its b is the row without the
// rejected children's tokens (`excludes`), over b_total, and `remaining` is
// the row's unnormalised mass left (row_mass once, then O(1) per rejection).
struct TraversalLevel {
  std::int32_t node = -1;
  std::int32_t next_child = -1;
  double p = 1.0;
  double b_total = 1.0, s_total = 1.0;
  double remaining = -1.0;  // one-hot slots: unknown until the first rejection
  bool b_scratch = false, s_scratch = false;
  bool excludes = false;
};

// A tree in flat arrays, for the device (and the host tests of what it runs):
// node i has parents[i] in [-1, i) and tokens[i]; slot s (-1 = root) has its
// children's draw in draws[s + 1] and, unless one-hot, their draft row at
// draft_rows + (s + 1) * vocab. Siblings are in index order.
struct FlatTree {
  const std::int32_t* parents = nullptr;
  const TokenId* tokens = nullptr;
  const std::uint8_t* draws = nullptr;  // SlotDraw values, [n + 1]
  const float* draft_rows = nullptr;    // [n + 1, vocab]; may be null if every slot is one-hot
  std::int32_t n = 0;
  std::int64_t vocab = 0;

  SPECDEC_HOST_DEVICE std::int32_t size() const { return n; }
  SPECDEC_HOST_DEVICE TokenId token(std::int32_t i) const { return tokens[i]; }
  SPECDEC_HOST_DEVICE std::int32_t first_child(std::int32_t slot) const {
    for (std::int32_t j = slot + 1; j < n; ++j)
      if (parents[j] == slot) return j;
    return -1;
  }
  SPECDEC_HOST_DEVICE std::int32_t next_sibling(std::int32_t i) const {
    for (std::int32_t j = i + 1; j < n; ++j)
      if (parents[j] == parents[i]) return j;
    return -1;
  }
  SPECDEC_HOST_DEVICE SlotDraw draw(std::int32_t slot) const {
    return static_cast<SlotDraw>(draws[slot + 1]);
  }
  SPECDEC_HOST_DEVICE const float* draft_row(std::int32_t slot) const {
    return draw(slot) == SlotDraw::kOneHot || draft_rows == nullptr ? nullptr
                                                                    : draft_rows + (slot + 1) * vocab;
  }
};

namespace detail {

// Whether y is the token of one of slot's children before `stop` (-1: all of
// them): a one-hot slot's rejected children, which its b no longer holds.
template <class Tree>
SPECDEC_HOST_DEVICE bool rejected_child_token(const Tree& tree, std::int32_t slot, std::int32_t stop,
                                              TokenId y) {
  for (std::int32_t c = tree.first_child(slot); c >= 0 && c != stop; c = tree.next_sibling(c))
    if (tree.token(c) == y) return true;
  return false;
}

// The smallest token above y among slot's children (all rejected), or vocab.
template <class Tree>
SPECDEC_HOST_DEVICE std::int64_t next_child_token(const Tree& tree, std::int32_t slot, std::int64_t y,
                                                  std::int64_t vocab) {
  std::int64_t best = vocab;
  for (std::int32_t c = tree.first_child(slot); c >= 0; c = tree.next_sibling(c)) {
    const std::int64_t t = tree.token(c);
    if (t > y && t < best) best = t;
  }
  return best;
}

// b(y) of a level (before child `stop`, for a one-hot slot), and s(y).
template <class Tree>
SPECDEC_HOST_DEVICE double level_b(const Tree& tree, const TraversalLevel& l, const float* row,
                                   const double* scratch, std::int32_t stop, std::int64_t y) {
  if (l.b_scratch) return scratch[y] / l.b_total;
  if (l.excludes && rejected_child_token(tree, l.node, stop, static_cast<TokenId>(y))) return 0.0;
  return static_cast<double>(row[y]) / l.b_total;
}
SPECDEC_HOST_DEVICE double level_s(const TraversalLevel& l, const float* q, const double* scratch,
                                   std::int64_t y) {
  return l.s_scratch ? scratch[y] / l.s_total : static_cast<double>(q[y]);
}

// A child of `l` with token x, drawn from its draft row q (sampled slots),
// was rejected: b <- norm(max(p b - s, 0)), p <- Z / (Z + 1 - p), and without
// replacement s loses x. Two passes over the vocabulary; the sums in
// bitexact::lane_sum's shape, so that a CUDA block (cuda/
// traversal_verification.cu) computes the same bits.
SPECDEC_HOST_DEVICE void reject_sampled(TraversalLevel& l, const float* row, const float* q,
                                        bool without_replacement, TokenId x, double* b, double* s,
                                        std::int64_t vocab) {
  const auto owed = [&](std::int64_t y) {
    const double b_y = l.b_scratch ? b[y] / l.b_total : static_cast<double>(row[y]);
    return residual_weight(l.p, b_y, level_s(l, q, s, y));
  };
  const double z = bitexact::lane_sum_of(owed, vocab);
  if (z > 0.0) {
    for (std::int64_t y = 0; y < vocab; ++y) b[y] = owed(y);
    l.b_total = z;
    l.b_scratch = true;
  }
  // else: nothing is owed (a weight-0 node, or rounding); b is kept for the
  // fallback draw and p drops to 0 unless it is 1.
  l.p = weight_after_rejection(l.p, z);
  if (without_replacement) {
    for (std::int64_t y = 0; y < vocab; ++y) s[y] = y == x ? 0.0 : level_s(l, q, s, y);
    l.s_total = bitexact::lane_sum(s, vocab);
    l.s_scratch = true;
  }
}

// The same for a one-hot child (s = one-hot at x), in O(1) after the row's
// mass is known: b becomes the row without x.
SPECDEC_HOST_DEVICE void reject_onehot(TraversalLevel& l, const float* row, double b_x_row,
                                       std::int64_t vocab) {
  if (l.remaining < 0.0) l.remaining = row_mass(row, vocab);
  const double z = onehot_residual_mass(l.p, l.remaining, b_x_row, l.b_total);
  if (z > 0.0) {
    l.remaining -= b_x_row;
    l.b_total = l.remaining;
    l.excludes = true;
  }
  l.p = weight_after_rejection(l.p, z);
}

}  // namespace detail

// Traversal verification of one tree (Weng et al., arXiv 2505.12398):
// depth-first from the root's first child, each node tested only once its
// children have all been rejected, leaf to root, with the sequence-level
// weight p of the header comment. Lossless for i.i.d., without-replacement
// and one-hot child sets (docs/acceptance.md has the proof sketch).
//   Tree:       size(), token(i), first_child(slot), next_sibling(i),
//               draw(slot), draft_row(slot) (FlatTree, or the host's adapter)
//   target_row(s + 1): the target's row after slot s (root: row 0)  [vocab]
//   levels:     scratch for the path, [depth + 1] (depth: the tree's deepest node)
//   scratch:    [2 * (depth + 1) * vocab] doubles
//   path:       the accepted nodes, root's child first            [depth]
//   emitted:    the token after them
// Returns the number of accepted nodes.
template <class Tree, class TargetRows>
SPECDEC_HOST_DEVICE std::int32_t traversal_verification_row(const Tree& tree, TargetRows target_row,
                                                            std::int64_t vocab, PhiloxUniforms uniforms,
                                                            TraversalLevel* levels, double* scratch,
                                                            std::int32_t* path, TokenId* emitted) {
  const std::int32_t n = tree.size();
  std::int32_t depth = 0;
  levels[0] = TraversalLevel{};
  levels[0].next_child = tree.first_child(-1);
  while (true) {
    TraversalLevel& l = levels[depth];
    const std::int32_t slot = l.node;
    double* b_scratch = scratch + static_cast<std::int64_t>(depth) * 2 * vocab;
    const float* b_row = target_row(slot + 1);

    std::int32_t rejected = -1;  // a child of this level that fails
    if (l.next_child >= 0) {
      const std::int32_t c = l.next_child;
      l.next_child = tree.next_sibling(c);
      const TokenId x = tree.token(c);
      const float* q = tree.draft_row(slot);
      const double s_x = q == nullptr ? 1.0 : detail::level_s(l, q, b_scratch + vocab, x);
      const double p_c = child_weight(l.p, detail::level_b(tree, l, b_row, b_scratch, c, x), s_x);
      if (p_c > 0.0) {  // descend; a child of weight 0 fails whatever lies below it
        TraversalLevel& next = levels[++depth];
        next = TraversalLevel{};
        next.node = c;
        next.p = p_c;
        next.next_child = tree.first_child(c);
        continue;
      }
      rejected = c;
    } else if (depth == 0 || uniforms[static_cast<std::uint64_t>(l.node)] < l.p) {
      // The node holds (the root always does: its weight stays 1).
      for (std::int32_t d = 1; d <= depth; ++d) path[d - 1] = levels[d].node;
      const double u = uniforms[static_cast<std::uint64_t>(n)];
      TokenId y = kNoToken;
      if (l.b_scratch)
        y = sample_row(b_scratch, vocab, u);
      else if (l.excludes)
        y = sample_excluding(b_row, vocab, u,
                             [&](std::int64_t k) { return detail::next_child_token(tree, slot, k, vocab); });
      if (y == kNoToken) y = sample_row(b_row, vocab, u);
      *emitted = y;
      return depth;
    } else {
      rejected = l.node;  // the node fails: its parent takes the rejection
      --depth;
    }

    // A child `rejected` of levels[depth] failed: update that level's laws.
    TraversalLevel& u = levels[depth];
    const float* u_row = target_row(u.node + 1);
    const float* uq = tree.draft_row(u.node);
    const TokenId x = tree.token(rejected);
    double* ub = scratch + static_cast<std::int64_t>(depth) * 2 * vocab;
    if (uq == nullptr) {
      // b(x) as the row holds it, 0 if an earlier sibling had x already.
      const bool gone = u.excludes && detail::rejected_child_token(tree, u.node, rejected, x);
      detail::reject_onehot(u, u_row, gone ? 0.0 : static_cast<double>(u_row[x]), vocab);
    } else {
      detail::reject_sampled(u, u_row, uq, tree.draw(u.node) == SlotDraw::kWithoutReplacement, x, ub,
                             ub + vocab, vocab);
    }
  }
}

}  // namespace specdec::row_math
