// What an acceptance rule returns for one tree: the accepted root-to-leaf path,
// the bonus token emitted after it, and per-depth outcomes for statistics.
#pragma once

#include <cstdint>
#include <vector>

#include "specdec/core/draft_tree.hpp"
#include "specdec/core/types.hpp"

namespace specdec {

struct VerifyResult {
  // Accepted node indices, root's child first. Empty when depth 1 was rejected.
  std::vector<std::int32_t> accepted_nodes;
  // The token emitted after the accepted path: the correction drawn from the
  // residual on a rejection, or the target's own next token after a leaf.
  TokenId bonus_token = kNoToken;
  // depth_accepted[d - 1] for every depth d the rule tried: 1 if a node at
  // depth d was accepted, 0 for the one depth where every child was rejected.
  // A run that ends at a leaf has no trailing 0.
  std::vector<std::uint8_t> depth_accepted;

  std::int32_t num_accepted() const { return static_cast<std::int32_t>(accepted_nodes.size()); }
  // Tokens this round commits: accepted drafts followed by the bonus token.
  std::vector<TokenId> emitted_tokens(const DraftTree& tree) const {
    std::vector<TokenId> out = tree.tokens_of(accepted_nodes);
    out.push_back(bonus_token);
    return out;
  }
  // Resets for reuse, keeping capacity.
  void clear() {
    accepted_nodes.clear();
    bonus_token = kNoToken;
    depth_accepted.clear();
  }
};

}  // namespace specdec
