// Greedy verification: the argmax of every target row a tree can reach (one
// block per row), then one thread per tree walks it (the host rule
// GreedyAcceptance's walk).
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "block_math.cuh"
#include "launch_checks.hpp"
#include "specdec/cuda/greedy_verification.hpp"

namespace specdec::cuda {
namespace {

using detail::kBlock;

// A row's argmax, or kNoToken when it holds a NaN or +inf (the host rule
// throws there). Rows past a tree's node count are padding: not read.
__global__ void __launch_bounds__(kBlock)
    row_argmax_kernel(const float* __restrict__ rows, const std::int32_t* __restrict__ tree_nodes,
                      TokenId* __restrict__ argmax, std::int32_t nodes, std::int64_t vocab) {
  __shared__ detail::BlockScratch sh;
  const std::int64_t r = blockIdx.x;
  const std::int64_t b = r / (nodes + 1), slot_row = r % (nodes + 1);
  if (tree_nodes != nullptr && slot_row > tree_nodes[b]) return;
  bool bad = false;
  const std::int64_t best = detail::block_argmax(rows + r * vocab, vocab, sh, &bad);
  if (threadIdx.x == 0) argmax[r] = bad ? kNoToken : static_cast<TokenId>(best);
}

__global__ void greedy_walk_kernel(const std::int32_t* __restrict__ parents,
                                   const TokenId* __restrict__ tokens,
                                   const std::int32_t* __restrict__ tree_nodes,
                                   const TokenId* __restrict__ argmax,
                                   std::int32_t* __restrict__ accepted_nodes,
                                   std::int32_t* __restrict__ num_accepted, TokenId* __restrict__ emitted,
                                   std::int32_t batch, std::int32_t nodes, std::int32_t max_depth,
                                   std::int64_t vocab) {
  const std::int64_t b = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const std::int32_t n = tree_nodes == nullptr ? nodes : tree_nodes[b];
  const std::int32_t* par = parents + b * nodes;
  const TokenId* tok = tokens + b * nodes;
  const TokenId* am = argmax + b * (nodes + 1);
  std::int32_t* path = accepted_nodes + b * max_depth;
  bool ok = n >= 0 && n <= nodes;
  for (std::int32_t j = 0; ok && j < n; ++j) ok = par[j] >= -1 && par[j] < j && tok[j] >= 0 && tok[j] < vocab;
  std::int32_t k = 0, slot = -1;
  TokenId y = kNoToken;
  while (ok) {
    y = am[slot + 1];
    if (y == kNoToken) {
      ok = false;
      break;
    }
    std::int32_t next = -1;
    for (std::int32_t c = slot + 1; c < n; ++c)
      if (par[c] == slot && tok[c] == y) {
        next = c;
        break;
      }
    if (next < 0) break;
    if (k == max_depth) {
      ok = false;
      break;
    }
    path[k++] = next;
    slot = next;
  }
  if (!ok) k = 0;
  for (std::int32_t j = k; j < max_depth; ++j) path[j] = -1;
  num_accepted[b] = ok ? k : -1;
  emitted[b] = ok ? y : kNoToken;
}

}  // namespace

Status greedy_verification(const float* target_rows, const std::int32_t* parents, const TokenId* tokens,
                           const std::int32_t* tree_nodes, TokenId* row_argmax, std::int32_t* accepted_nodes,
                           std::int32_t* num_accepted, TokenId* emitted, std::int32_t batch,
                           std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab, void* stream) {
  if (batch < 0 || nodes < 0 || nodes == std::numeric_limits<std::int32_t>::max() || max_depth < 0 ||
      max_depth > nodes || vocab <= 0 || vocab > std::numeric_limits<TokenId>::max())
    return Status::kInvalidArgument;
  const std::int64_t rows = static_cast<std::int64_t>(batch) * (static_cast<std::int64_t>(nodes) + 1);
  if (rows > std::numeric_limits<std::int32_t>::max()) return Status::kInvalidArgument;  // grid size
  if (rows > 0 && vocab > std::numeric_limits<std::int64_t>::max() / rows) return Status::kInvalidArgument;
  if (batch == 0) return Status::kOk;
  if (target_rows == nullptr || row_argmax == nullptr || num_accepted == nullptr || emitted == nullptr ||
      (nodes > 0 && (parents == nullptr || tokens == nullptr)) ||
      (max_depth > 0 && accepted_nodes == nullptr))
    return Status::kInvalidArgument;
  const auto s = static_cast<cudaStream_t>(stream);
  row_argmax_kernel<<<static_cast<unsigned>(rows), kBlock, 0, s>>>(target_rows, tree_nodes, row_argmax, nodes,
                                                                   vocab);
  if (cudaGetLastError() != cudaSuccess) return Status::kCudaError;
  greedy_walk_kernel<<<detail::blocks_for(batch), detail::kThreadsPerBlock, 0, s>>>(
      parents, tokens, tree_nodes, row_argmax, accepted_nodes, num_accepted, emitted, batch, nodes, max_depth,
      vocab);
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kCudaError;
}

}  // namespace specdec::cuda
