// torch.ops.specdec: the acceptance rules and the warp as PyTorch custom
// operators (docs/python.md, "PyTorch operators"), shared by the CPU kernels
// (torch_ops.cpp) and the CUDA ones (torch_ops_cuda.cpp). The layouts are
// the CUDA launchers' (include/specdec/cuda/*.hpp), which follow FlashInfer's
// sampling API: batch-first padded rows, one Philox (seed, offset) per row.
#pragma once

#include <torch/library.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/rng.hpp"

namespace specdec::torch_ops {

using at::Tensor;
using OptTensor = c10::optional<Tensor>;
using TreeOutcome = std::tuple<Tensor, Tensor, Tensor>;  // accepted_nodes, num_accepted, emitted

// The rules verify_trees takes by name (docs/python.md lists what each reads).
inline constexpr std::string_view kTreeRules[] = {"greedy",
                                                  "speculative_sampling",
                                                  "recursive_rejection_sampling",
                                                  "block_verification",
                                                  "traversal_verification",
                                                  "typical_acceptance"};

inline void check_rule_name(std::string_view rule) {
  for (std::string_view r : kTreeRules)
    if (r == rule) return;
  throw InvalidArgumentError(fmt::format(
      "verify_trees: unknown rule '{}' (greedy, speculative_sampling, recursive_rejection_sampling, "
      "block_verification, traversal_verification, typical_acceptance)",
      rule));
}

// Every error leaves the operator as a RuntimeError whose message starts
// with the Python class name ("specdec.ShapeError: ..."): torch turns any
// std::exception into RuntimeError, and specdec/ops.py raises the typed one.
template <class F>
decltype(auto) typed_errors(F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const InvalidArgumentError& e) {
    throw std::runtime_error(std::string("specdec.InvalidArgumentError: ") + e.what());
  } catch (const ShapeError& e) {
    throw std::runtime_error(std::string("specdec.ShapeError: ") + e.what());
  } catch (const InvalidDistributionError& e) {
    throw std::runtime_error(std::string("specdec.InvalidDistributionError: ") + e.what());
  } catch (const InvalidTreeError& e) {
    throw std::runtime_error(std::string("specdec.InvalidTreeError: ") + e.what());
  } catch (const UnsupportedError& e) {
    throw std::runtime_error(std::string("specdec.UnsupportedError: ") + e.what());
  } catch (const DeviceError& e) {
    throw std::runtime_error(std::string("specdec.DeviceError: ") + e.what());
  } catch (const Error& e) {
    throw std::runtime_error(std::string("specdec.Error: ") + e.what());
  }
}

// Checks one argument: its dtype, its rank and (where given) its sizes, and
// that it lives on `device`. Returns it contiguous (a copy only when it is
// not already).
inline Tensor expect(const Tensor& t, std::string_view what, at::ScalarType dtype,
                     std::vector<std::int64_t> sizes, const c10::Device& device) {
  if (t.scalar_type() != dtype)
    throw InvalidArgumentError(
        fmt::format("{} must be {}, got {}", what, c10::toString(dtype), c10::toString(t.scalar_type())));
  if (t.dim() != static_cast<std::int64_t>(sizes.size()))
    throw ShapeError(fmt::format("{} must have {} dimensions, got {}", what, sizes.size(), t.dim()));
  for (std::size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] >= 0 && t.size(static_cast<std::int64_t>(d)) != sizes[d])
      throw ShapeError(fmt::format("{}: dimension {} is {}, expected {}", what, d,
                                   t.size(static_cast<std::int64_t>(d)), sizes[d]));
  if (t.device() != device)
    throw InvalidArgumentError(
        fmt::format("{} is on {}, the other tensors on {}", what, t.device().str(), device.str()));
  return t.contiguous();
}

// Token ids: int32, or int64 narrowed (a copy) as FlashInfer's callers pass both.
inline Tensor expect_tokens(const Tensor& t, std::string_view what, std::vector<std::int64_t> sizes,
                            const c10::Device& device) {
  if (t.scalar_type() == at::kLong) return expect(t.to(at::kInt), what, at::kInt, std::move(sizes), device);
  return expect(t, what, at::kInt, std::move(sizes), device);
}

// The seed and offset of each row: a per-row int64 tensor where given (on
// any device), else the scalar. Row b draws philox_uniform(seed_b, b,
// offset_b + j), as FlashInfer's kernels do (stream = the row).
struct RowSeeds {
  Tensor seeds, offsets;  // int64 [batch], on `device`

  RowSeeds(const OptTensor& seed_arr, std::int64_t seed, const OptTensor& offset_arr, std::int64_t offset,
           std::int64_t batch, const c10::Device& device) {
    seeds = per_row(seed_arr, seed, batch, device, "seed_arr");
    offsets = per_row(offset_arr, offset, batch, device, "offset_arr");
  }

  // [batch, 3] int64: (seed, stream, offset) per row, the layout of
  // PhiloxUniforms, for the launchers' tree_streams.
  Tensor philox() const {
    const auto batch = seeds.size(0);
    return at::stack({seeds, at::arange(batch, seeds.options()), offsets}, 1).contiguous();
  }

 private:
  static Tensor per_row(const OptTensor& arr, std::int64_t value, std::int64_t batch,
                        const c10::Device& device, std::string_view what) {
    if (!arr.has_value())
      return at::full({batch}, value, at::TensorOptions().dtype(at::kLong).device(device));
    if (arr->scalar_type() != at::kLong)
      throw InvalidArgumentError(
          fmt::format("{} must be int64, got {}", what, c10::toString(arr->scalar_type())));
    if (arr->dim() != 1 || arr->size(0) != batch)
      throw ShapeError(fmt::format("{} must be [batch] = [{}]", what, batch));
    return arr->to(device).contiguous();
  }
};

static_assert(sizeof(PhiloxUniforms) == 3 * sizeof(std::int64_t), "RowSeeds::philox() packs PhiloxUniforms");

// The checked arguments of verify_trees, on either device.
struct FlatTreeArgs {
  std::string_view rule;  // one of kTreeRules
  std::int64_t batch = 0, nodes = 0, vocab = 0, max_depth = 0;
  Tensor parents, tokens, slot_draws, target, tree_nodes;  // tree_nodes undefined: every tree has `nodes`
  OptTensor draft;

  FlatTreeArgs(c10::string_view rule_in, const Tensor& parents_in, const Tensor& tokens_in,
               const Tensor& slot_draws_in, const OptTensor& draft_in, const Tensor& target_in,
               const OptTensor& tree_nodes_in, std::int64_t max_depth_in) {
    rule = std::string_view(rule_in.data(), rule_in.size());
    check_rule_name(rule);
    const c10::Device device = target_in.device();
    if (target_in.dim() != 3)
      throw ShapeError(
          fmt::format("target_probs must be [batch, nodes + 1, vocab], got {} dimensions", target_in.dim()));
    batch = target_in.size(0);
    nodes = target_in.size(1) - 1;
    vocab = target_in.size(2);
    if (nodes < 0) throw ShapeError("target_probs must have nodes + 1 >= 1 rows per tree");
    target = expect(target_in, "target_probs", at::kFloat, {batch, nodes + 1, vocab}, device);
    parents = expect(parents_in, "parents", at::kInt, {batch, nodes}, device);
    tokens = expect_tokens(tokens_in, "tokens", {batch, nodes}, device);
    slot_draws = expect(slot_draws_in, "slot_draws", at::kByte, {batch, nodes + 1}, device);
    if (draft_in.has_value())
      draft = expect(*draft_in, "draft_probs", at::kFloat, {batch, nodes + 1, vocab}, device);
    if (tree_nodes_in.has_value())
      tree_nodes = expect(*tree_nodes_in, "tree_nodes", at::kInt, {batch}, device);
    if (max_depth_in < 0) max_depth_in = nodes;  // -1: as deep as a tree can be
    if (max_depth_in > nodes)
      throw InvalidArgumentError(
          fmt::format("max_depth {} exceeds the {} nodes per tree", max_depth_in, nodes));
    max_depth = max_depth_in;
  }

  TreeOutcome outputs() const {
    const auto ints = target.options().dtype(at::kInt);
    return {at::full({batch, max_depth}, -1, ints), at::empty({batch}, ints), at::empty({batch}, ints)};
  }
};

// The checked arguments of the chain-shaped operators (FlashInfer's
// chain_speculative_sampling): drafts [batch, n], draft rows [batch, n,
// vocab] or none (one-hot drafts), target rows [batch, n + 1, vocab].
struct ChainArgs {
  std::int64_t batch = 0, gamma = 0, vocab = 0;
  Tensor tokens, target;
  OptTensor draft;

  ChainArgs(const OptTensor& draft_in, const Tensor& tokens_in, const Tensor& target_in) {
    const c10::Device device = target_in.device();
    if (target_in.dim() != 3)
      throw ShapeError(
          fmt::format("target_probs must be [batch, num_speculate_tokens + 1, vocab], got {} "
                      "dimensions",
                      target_in.dim()));
    batch = target_in.size(0);
    gamma = target_in.size(1) - 1;
    vocab = target_in.size(2);
    if (gamma < 0) throw ShapeError("target_probs must have num_speculate_tokens + 1 >= 1 rows per request");
    target = expect(target_in, "target_probs", at::kFloat, {batch, gamma + 1, vocab}, device);
    tokens = expect_tokens(tokens_in, "draft_token_ids", {batch, gamma}, device);
    if (draft_in.has_value())
      draft = expect(*draft_in, "draft_probs", at::kFloat, {batch, gamma, vocab}, device);
  }
};

// The per-row sampling parameters of warp: [rows] tensors, checked.
struct WarpArgs {
  std::int64_t rows = 0, vocab = 0;
  Tensor logits, temperature, top_k, top_p;

  WarpArgs(const Tensor& logits_in, const Tensor& temperature_in, const Tensor& top_k_in,
           const Tensor& top_p_in) {
    const c10::Device device = logits_in.device();
    if (logits_in.dim() != 2)
      throw ShapeError(fmt::format("logits must be [rows, vocab], got {} dimensions", logits_in.dim()));
    rows = logits_in.size(0);
    vocab = logits_in.size(1);
    logits = expect(logits_in, "logits", at::kFloat, {rows, vocab}, device);
    temperature = expect(temperature_in, "temperature", at::kFloat, {rows}, device);
    top_k = expect(top_k_in, "top_k", at::kInt, {rows}, device);
    top_p = expect(top_p_in, "top_p", at::kFloat, {rows}, device);
  }
};

}  // namespace specdec::torch_ops
