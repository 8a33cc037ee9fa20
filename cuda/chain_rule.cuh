// What the chain rules' kernels share (chain_speculative_sampling,
// block_verification and their FlatTrees forms): one block per chain, which
// checks the chain's inputs, runs the rule's one-chain body and writes the
// outcome. A Rule is a functor whose operator()(draft_row, tokens, target
// rows, gamma, vocab, uniforms, scratch) returns the chain's ChainOutcome,
// every thread of the block calling it together; draft_row(i) is q_i, or
// null for a deterministic draft (q = one-hot).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "block_math.cuh"
#include "launch_checks.hpp"
#include "specdec/accept/row_math.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/types.hpp"

namespace specdec::cuda::detail {

struct ChainOutcome {
  std::int32_t accepted;
  TokenId emitted;
};

// The dense form: chain b's drafts at [b, gamma], its rows at [b, gamma (+
// 1), vocab]; a drafted token outside the vocabulary flags the chain.
template <class Rule>
__global__ void __launch_bounds__(kBlock)
    dense_chain_kernel(const float* __restrict__ draft_probs, const TokenId* __restrict__ draft_tokens,
                       const float* __restrict__ target_probs, TokenId* __restrict__ output_tokens,
                       std::int32_t* __restrict__ num_accepted, std::int32_t gamma, std::int64_t vocab,
                       std::uint64_t seed, std::uint64_t offset, const PhiloxUniforms* __restrict__ tree_streams) {
  __shared__ BlockScratch sh;
  const std::int64_t b = blockIdx.x;
  const TokenId* tokens = draft_tokens + b * gamma;
  TokenId* out = output_tokens + b * (gamma + 1);
  bool bad = false;
  for (std::int32_t i = 0; i < gamma; ++i) bad |= tokens[i] < 0 || tokens[i] >= vocab;
  if (bad) {
    if (threadIdx.x == 0) flag_bad_chain(tokens, gamma, vocab, out, num_accepted + b);
    return;
  }
  const row_math::StridedRows draft_row{draft_probs == nullptr ? nullptr : draft_probs + b * gamma * vocab, vocab};
  // Row b draws from Philox stream b: the host rule's RandomStream(seed, b, offset).
  const ChainOutcome o = Rule{}(draft_row, tokens, target_probs + b * (gamma + 1) * vocab, gamma, vocab,
                                tree_uniforms(tree_streams, seed, b, offset), sh);
  if (threadIdx.x == 0) {
    for (std::int32_t j = 0; j < o.accepted; ++j) out[j] = tokens[j];
    out[o.accepted] = o.emitted;
    for (std::int32_t j = o.accepted + 1; j <= gamma; ++j) out[j] = kNoToken;
    num_accepted[b] = o.accepted;
  }
}

template <class Rule>
Status launch_dense_chain(const float* draft_probs, const TokenId* draft_tokens, const float* target_probs,
                          TokenId* output_tokens, std::int32_t* num_accepted, std::int32_t batch, std::int32_t gamma,
                          std::int64_t vocab, std::uint64_t seed, std::uint64_t offset, void* stream,
                          const PhiloxUniforms* tree_streams) {
  // Validate before any CUDA call, so bad arguments never touch the device.
  if (!valid_chain_arguments(draft_tokens, target_probs, output_tokens, num_accepted, batch, gamma, vocab))
    return Status::kInvalidArgument;
  if (vocab > kMaxBlockVocab) return Status::kInvalidArgument;
  if (batch == 0) return Status::kOk;
  dense_chain_kernel<Rule><<<static_cast<unsigned>(batch), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      draft_probs, draft_tokens, target_probs, output_tokens, num_accepted, gamma, vocab, seed, offset,
      tree_streams);
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kCudaError;
}

// The FlatTrees form: tree b must be a chain (valid_flat_chain); its draft
// rows are its slots' (one-hot at deterministic slots).
template <class Rule>
__device__ void verify_flat_chain(Rule rule, const std::int32_t* __restrict__ parents,
                                  const TokenId* __restrict__ tokens, const std::uint8_t* __restrict__ slot_draws,
                                  const float* __restrict__ draft_probs, const float* __restrict__ target_probs,
                                  const std::int32_t* __restrict__ tree_nodes,
                                  std::int32_t* __restrict__ accepted_nodes,
                                  std::int32_t* __restrict__ num_accepted, TokenId* __restrict__ emitted,
                                  std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab, std::uint64_t seed,
                                  std::uint64_t offset, const PhiloxUniforms* __restrict__ tree_streams,
                                  BlockScratch& sh) {
  const std::int64_t b = blockIdx.x;
  const std::int32_t n = tree_nodes == nullptr ? nodes : tree_nodes[b];
  const std::int64_t rows = static_cast<std::int64_t>(nodes) + 1;
  const std::int32_t* par = parents + b * nodes;
  const TokenId* tok = tokens + b * nodes;
  const std::uint8_t* draws = slot_draws + b * rows;
  std::int32_t* path = accepted_nodes + b * max_depth;
  if (!valid_flat_chain(par, tok, draws, draft_probs != nullptr, n, nodes, max_depth, vocab)) {
    if (threadIdx.x == 0) write_flat_chain(-1, kNoToken, max_depth, path, num_accepted + b, emitted + b);
    return;
  }
  const FlatChainDraftRows draft_row{draft_probs == nullptr ? nullptr : draft_probs + b * rows * vocab, draws, vocab};
  const ChainOutcome o =
      rule(draft_row, tok, target_probs + b * rows * vocab, n, vocab, tree_uniforms(tree_streams, seed, b, offset), sh);
  if (threadIdx.x == 0) write_flat_chain(o.accepted, o.emitted, max_depth, path, num_accepted + b, emitted + b);
}

template <class Rule>
__global__ void __launch_bounds__(kBlock)
    flat_chain_kernel(const std::int32_t* __restrict__ parents, const TokenId* __restrict__ tokens,
                      const std::uint8_t* __restrict__ slot_draws, const float* __restrict__ draft_probs,
                      const float* __restrict__ target_probs, const std::int32_t* __restrict__ tree_nodes,
                      std::int32_t* __restrict__ accepted_nodes, std::int32_t* __restrict__ num_accepted,
                      TokenId* __restrict__ emitted, std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab,
                      std::uint64_t seed, std::uint64_t offset, const PhiloxUniforms* __restrict__ tree_streams) {
  __shared__ BlockScratch sh;
  verify_flat_chain(Rule{}, parents, tokens, slot_draws, draft_probs, target_probs, tree_nodes, accepted_nodes,
                    num_accepted, emitted, nodes, max_depth, vocab, seed, offset, tree_streams, sh);
}

// The launchers' arguments and refusals are in their headers.
template <class Rule>
Status launch_flat_chain(const std::int32_t* parents, const TokenId* tokens, const std::uint8_t* slot_draws,
                         const float* draft_probs, const float* target_probs, const std::int32_t* tree_nodes,
                         std::int32_t* accepted_nodes, std::int32_t* num_accepted, TokenId* emitted,
                         std::int32_t batch, std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab,
                         std::uint64_t seed, std::uint64_t offset, void* stream,
                         const PhiloxUniforms* tree_streams) {
  if (!valid_flat_arguments(parents, tokens, slot_draws, target_probs, accepted_nodes, num_accepted, emitted, batch,
                            nodes, max_depth, vocab))
    return Status::kInvalidArgument;
  if (vocab > kMaxBlockVocab) return Status::kInvalidArgument;
  if (batch == 0) return Status::kOk;
  flat_chain_kernel<Rule><<<static_cast<unsigned>(batch), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      parents, tokens, slot_draws, draft_probs, target_probs, tree_nodes, accepted_nodes, num_accepted, emitted,
      nodes, max_depth, vocab, seed, offset, tree_streams);
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kCudaError;
}

}  // namespace specdec::cuda::detail
