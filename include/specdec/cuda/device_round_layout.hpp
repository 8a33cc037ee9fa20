// One round's batch as the device verification path moves it (DeviceRound,
// docs/cuda.md): what goes to the device in one copy, where each forward row
// is warped to, and how the results that come back become VerifyResults.
//
// The target's forward writes its rows item after item (the root, then the
// tree's nodes: ModelVerifier's order), a ragged [sum of (size + 1), vocab].
// The tree rules read a padded [batch, nodes + 1, vocab] (FlatTrees), so the
// warp writes forward row r into padded row out_rows()[r], with the row's own
// request's sampling (row_params()[r]). Each tree's rule draws from its own
// request's stream (streams()[b]: the request's RandomStream as seed, stream
// and next offset), so the device consumes exactly the uniforms the host rule
// would, and the request's stream moves on by what the tree used.
//
// Host code only (no CUDA headers): it fills host memory for one copy.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/draft_tree.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/verify_result.hpp"
#include "specdec/cuda/flat_trees.hpp"
#include "specdec/cuda/warp.hpp"

namespace specdec::cuda {

// One run of draft rows to copy into the padded layout: rows [source_row,
// source_row + rows) of item `item`'s draft rows become padded rows
// [padded_row, padded_row + rows) (see DeviceRoundLayout::draft_copies).
struct DraftRowCopy {
  std::int32_t item = 0;
  std::int64_t source_row = 0;
  std::int64_t padded_row = 0;
  std::int64_t rows = 0;
};

// One request's part of a round.
struct DeviceRoundItem {
  const DraftTree* tree = nullptr;  // what the target scored: the root and these nodes
  SamplingParams sampling;          // the request's; every row of the tree is warped with it
  PhiloxUniforms stream;            // the rule's uniforms: the request's stream, from its next draw
};

class DeviceRoundLayout {
 public:
  // Where each array sits in blob(): byte offsets, each 16-byte aligned.
  struct Offsets {
    std::size_t parents = 0, tokens = 0, draws = 0, sizes = 0, out_rows = 0, params = 0, streams = 0;
    std::size_t bytes = 0;  // the blob's size
  };
  // Where each output sits in the results blob a round copies back.
  struct ResultOffsets {
    std::size_t accepted_nodes = 0, num_accepted = 0, emitted = 0, draws_used = 0;
    std::size_t bytes = 0;
  };

  DeviceRoundLayout() = default;
  explicit DeviceRoundLayout(std::span<const DeviceRoundItem> items) { assign(items); }

  // Lays out `items`, whose trees must stay unchanged until the last
  // decode() of the round. Throws InvalidArgumentError for an item without a tree
  // or with sampling parameters outside their domain (SamplingParams::validate).
  void assign(std::span<const DeviceRoundItem> items) {
    trees_.clear();
    for (const auto& item : items) {
      if (item.tree == nullptr) throw InvalidArgumentError("DeviceRoundLayout: an item has no tree");
      item.sampling.validate();
      trees_.push_back(item.tree);
    }
    flat_.assign(trees_);
    const auto padded = static_cast<std::int64_t>(flat_.nodes()) + 1;
    out_rows_.clear();
    params_.clear();
    streams_.clear();
    first_rows_.clear();
    copies_.clear();
    for (std::size_t b = 0; b < items.size(); ++b) {
      const auto& item = items[b];
      first_rows_.push_back(static_cast<std::int64_t>(out_rows_.size()));
      const RowSampling row{item.sampling.temperature, item.sampling.top_k, item.sampling.top_p};
      for (std::int32_t slot = DraftTree::kRoot; slot < item.tree->size(); ++slot) {
        out_rows_.push_back(static_cast<std::int32_t>(static_cast<std::int64_t>(b) * padded + slot + 1));
        params_.push_back(row);
        if (FlatTrees::draw_code(item.tree->children_mode(slot)) != 0)  // a sampled slot
          add_copy(static_cast<std::int32_t>(b), item.tree->children_draft_row(slot),
                   flat_.row(static_cast<std::int32_t>(b), slot));
      }
      streams_.push_back(item.stream);
    }
    pack();
  }

  const FlatTrees& trees() const { return flat_; }
  std::int32_t batch() const { return flat_.batch(); }
  // Rows of the target's forward: sum over items of (tree size + 1).
  std::int64_t forward_rows() const { return static_cast<std::int64_t>(out_rows_.size()); }
  // Rows of the padded layout the rules read: batch x (nodes + 1).
  std::int64_t padded_rows() const { return std::int64_t{flat_.batch()} * (std::int64_t{flat_.nodes()} + 1); }
  // Item b's root row in the forward.
  std::int64_t first_row(std::int32_t b) const { return first_rows_.at(static_cast<std::size_t>(b)); }
  const std::vector<std::int32_t>& out_rows() const { return out_rows_; }
  const std::vector<RowSampling>& row_params() const { return params_; }
  const std::vector<PhiloxUniforms>& streams() const { return streams_; }
  // The draft rows the rules read, as copies from each item's draft rows (a
  // drafter's rows, indexed as DraftTree::children_draft_row says) into the
  // padded layout (slot s of tree b at trees().row(b, s)): one per run of
  // sampled slots whose rows follow one another in both, in item order.
  const std::vector<DraftRowCopy>& draft_copies() const { return copies_; }

  // Every host array in one buffer, for one host-to-device copy.
  std::span<const std::byte> blob() const { return blob_; }
  const Offsets& offsets() const { return offsets_; }

  // The results' layout for this batch: accepted_nodes [batch, max(1,
  // max_depth)], num_accepted, emitted and draws_used [batch].
  ResultOffsets result_offsets() const {
    ResultOffsets r;
    std::size_t at = 0;
    const auto b = static_cast<std::size_t>(flat_.batch());
    r.accepted_nodes = place(at, b * static_cast<std::size_t>(path_width()) * sizeof(std::int32_t));
    r.num_accepted = place(at, b * sizeof(std::int32_t));
    r.emitted = place(at, b * sizeof(TokenId));
    r.draws_used = place(at, b * sizeof(std::int32_t));
    r.bytes = at;
    return r;
  }
  // Columns of accepted_nodes: the deepest tree's depth, at least 1.
  std::int32_t path_width() const { return std::max<std::int32_t>(1, flat_.max_depth()); }

  // Tree b's outcome from a results blob laid out by result_offsets(): its
  // path, token and depth_accepted as the host rules fill them (a 1 per
  // accepted depth, then a 0 where the path stopped above a leaf). Returns
  // the uniforms it used. Throws InvalidTreeError when the kernel refused the
  // tree (num_accepted -1) or its outputs are inconsistent with the tree.
  std::int32_t decode(std::int32_t b, std::span<const std::byte> results, VerifyResult& out) const {
    const auto r = result_offsets();
    if (results.size() < r.bytes)
      throw ShapeError(fmt::format("DeviceRoundLayout::decode: {} result bytes, the batch needs {}",
                                   results.size(), r.bytes));
    if (b < 0 || b >= batch())
      throw InvalidArgumentError(
          fmt::format("DeviceRoundLayout::decode: tree {} of a batch of {}", b, batch()));
    const auto at = [&](std::size_t offset, std::size_t index, auto value) {
      std::memcpy(&value, results.data() + offset + index * sizeof(value), sizeof(value));
      return value;
    };
    const auto i = static_cast<std::size_t>(b);
    const DraftTree& tree = *trees_[i];
    const std::int32_t n = at(r.num_accepted, i, std::int32_t{});
    const TokenId token = at(r.emitted, i, TokenId{});
    if (n < 0) throw InvalidTreeError(fmt::format("DeviceRound: the rule kernel refused tree {}", b));
    if (n > tree.max_depth() || token == kNoToken)
      throw InvalidTreeError(
          fmt::format("DeviceRound: tree {} came back with {} accepted nodes and token {}", b, n, token));
    out.clear();
    std::int32_t last = DraftTree::kRoot;
    for (std::int32_t d = 0; d < n; ++d) {
      const std::int32_t node =
          at(r.accepted_nodes, i * static_cast<std::size_t>(path_width()) + static_cast<std::size_t>(d),
             std::int32_t{});
      if (node < 0 || node >= tree.size() || tree.parent(node) != last)
        throw InvalidTreeError(
            fmt::format("DeviceRound: tree {}'s path leaves the tree at depth {}", b, d + 1));
      out.accepted_nodes.push_back(node);
      out.depth_accepted.push_back(1);
      last = node;
    }
    if (tree.num_children(last) > 0) out.depth_accepted.push_back(0);
    out.bonus_token = token;
    return at(r.draws_used, i, std::int32_t{});
  }

 private:
  // Reserves `bytes` at the next 16-byte boundary from `at`; returns where.
  static std::size_t place(std::size_t& at, std::size_t bytes) {
    at = (at + 15) / 16 * 16;
    const std::size_t where = at;
    at += bytes;
    return where;
  }
  // Records that padded row `padded_row` reads item b's draft row
  // `source_row`, extending the last run where both follow it.
  void add_copy(std::int32_t b, std::int32_t source_row, std::int64_t padded_row) {
    if (source_row < 0)
      throw InvalidTreeError(fmt::format(
          "DeviceRoundLayout: tree {} has a sampled slot with no draft row (DraftTree::set_children_source)", b));
    if (!copies_.empty()) {
      DraftRowCopy& last = copies_.back();
      if (last.item == b && last.source_row + last.rows == source_row && last.padded_row + last.rows == padded_row) {
        ++last.rows;
        return;
      }
    }
    copies_.push_back(DraftRowCopy{b, source_row, padded_row, 1});
  }

  template <class T>
  void copy_in(std::size_t offset, const std::vector<T>& v) {
    if (!v.empty()) std::memcpy(blob_.data() + offset, v.data(), v.size() * sizeof(T));
  }

  void pack() {
    Offsets o;
    std::size_t at = 0;
    o.parents = place(at, flat_.parents().size() * sizeof(std::int32_t));
    o.tokens = place(at, flat_.tokens().size() * sizeof(TokenId));
    o.draws = place(at, flat_.draws().size() * sizeof(std::uint8_t));
    o.sizes = place(at, flat_.sizes().size() * sizeof(std::int32_t));
    o.out_rows = place(at, out_rows_.size() * sizeof(std::int32_t));
    o.params = place(at, params_.size() * sizeof(RowSampling));
    o.streams = place(at, streams_.size() * sizeof(PhiloxUniforms));
    o.bytes = (at + 15) / 16 * 16;
    offsets_ = o;
    blob_.assign(o.bytes, std::byte{0});
    copy_in(o.parents, flat_.parents());
    copy_in(o.tokens, flat_.tokens());
    copy_in(o.draws, flat_.draws());
    copy_in(o.sizes, flat_.sizes());
    copy_in(o.out_rows, out_rows_);
    copy_in(o.params, params_);
    copy_in(o.streams, streams_);
  }

  std::vector<const DraftTree*> trees_;  // the round's trees (the items'), read again by decode()
  FlatTrees flat_;
  std::vector<std::int32_t> out_rows_;
  std::vector<RowSampling> params_;
  std::vector<PhiloxUniforms> streams_;
  std::vector<std::int64_t> first_rows_;
  std::vector<DraftRowCopy> copies_;
  std::vector<std::byte> blob_;
  Offsets offsets_;
};

}  // namespace specdec::cuda
