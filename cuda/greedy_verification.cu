// Greedy verification in one launch: blocks of 1024 threads each take a
// segment of one target row (a chunk of 8192 tokens at batch 1, the whole row
// at large batches, so that every SM has work) and fold its argmax into the
// row's with a 64-bit atomicMax; the last block of a tree to finish (see
// chain_speculative_sampling_from_logits.cu) walks it as the host rule
// GreedyAcceptance does, and returns the row keys to zero.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "block_math.cuh"
#include "launch_checks.hpp"
#include "specdec/cuda/greedy_verification.hpp"

namespace specdec::cuda {
namespace {

using detail::kBlock;
constexpr std::int64_t kChunk = bitexact::kSumChunk;
constexpr std::int64_t kMaxTrees = 65535;
constexpr std::uint64_t kBadRow = ~std::uint64_t{0};  // a NaN or +inf in the row

// A (value, token) pair as a key whose unsigned order is the host argmax's:
// the larger value, then the lower token. Row keys start at 0, below any pair.
__device__ std::uint64_t argmax_key(float value, std::int64_t token) {
  return (static_cast<std::uint64_t>(bitexact::ordered_key(value)) << 32) |
         (0xffffffffu - static_cast<std::uint32_t>(token));
}

struct Workspace {
  unsigned* counts;    // [kMaxTrees]: blocks counted in per tree (zero between launches)
  std::uint64_t* keys;  // [batch, nodes + 1]: each row's argmax key (zero between launches)
  static constexpr std::size_t kCountBytes = (kMaxTrees * sizeof(unsigned) + 15) / 16 * 16;
  static Workspace at(void* base) {
    auto* p = static_cast<char*>(base);
    return {reinterpret_cast<unsigned*>(p), reinterpret_cast<std::uint64_t*>(p + kCountBytes)};
  }
};

// The host rule's walk over one tree (thread 0 of its last block).
__device__ __noinline__ void walk(const std::int32_t* par, const TokenId* tok, const std::uint64_t* keys, std::int32_t n,
                     std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab, std::int32_t* path,
                     std::int32_t* num_accepted, TokenId* emitted) {
  bool ok = n >= 0 && n <= nodes;
  for (std::int32_t j = 0; ok && j < n; ++j) ok = par[j] >= -1 && par[j] < j && tok[j] >= 0 && tok[j] < vocab;
  std::int32_t k = 0, slot = -1;
  TokenId y = kNoToken;
  while (ok) {
    const std::uint64_t key = __ldcg(reinterpret_cast<const unsigned long long*>(keys + slot + 1));
    if (key == kBadRow) {
      ok = false;
      break;
    }
    y = static_cast<TokenId>(0xffffffffu - static_cast<std::uint32_t>(key & 0xffffffffu));
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
  *num_accepted = ok ? k : -1;
  *emitted = ok ? y : kNoToken;
}

__global__ void __launch_bounds__(kBlock, 2)
    greedy_kernel(const float* __restrict__ rows, const std::int32_t* __restrict__ parents,
                  const TokenId* __restrict__ tokens, const std::int32_t* __restrict__ tree_nodes,
                  std::int32_t* __restrict__ accepted_nodes, std::int32_t* __restrict__ num_accepted,
                  TokenId* __restrict__ emitted, Workspace ws, std::int32_t nodes, std::int32_t max_depth,
                  std::int64_t vocab, std::int64_t per_block) {
  __shared__ detail::BlockScratch sh;
  const std::int64_t r = blockIdx.y;
  const std::int64_t b = r / (nodes + 1), slot_row = r % (nodes + 1);
  // Rows past a tree's own size are padding: never read, never counted. A
  // size out of range is the walk's to refuse: count its rows as `nodes`.
  const std::int32_t given = tree_nodes == nullptr ? nodes : tree_nodes[b];
  const std::int32_t n = given >= 0 && given <= nodes ? given : nodes;
  if (slot_row > n) return;
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.x) * per_block;
  const std::int64_t len = std::min(per_block, vocab - begin);
  bool bad = false;
  const std::int64_t best = begin + detail::block_argmax(rows + r * vocab + begin, len, sh, &bad);
  const auto segments = static_cast<unsigned>((vocab + per_block - 1) / per_block);
  if (threadIdx.x == 0)
    atomicMax(reinterpret_cast<unsigned long long*>(ws.keys + r),
              bad ? kBadRow : argmax_key(rows[r * vocab + best], best));
  if (!detail::last_block_of(ws.counts + b, static_cast<unsigned>(n + 1) * segments)) return;
  std::uint64_t* keys = ws.keys + b * (nodes + 1);
  if (threadIdx.x == 0)
    walk(parents + b * nodes, tokens + b * nodes, keys, given, nodes, max_depth, vocab,
         accepted_nodes + b * max_depth, num_accepted + b, emitted + b);
  __syncthreads();
  for (std::int32_t j = static_cast<std::int32_t>(threadIdx.x); j <= n; j += kBlock) keys[j] = 0;
}

bool valid_shape(std::int32_t batch, std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab) {
  if (batch < 0 || batch > kMaxTrees || nodes < 0 || max_depth < 0 || max_depth > nodes || vocab <= 0 ||
      vocab > std::numeric_limits<TokenId>::max())
    return false;
  const std::int64_t rows = static_cast<std::int64_t>(batch) * (static_cast<std::int64_t>(nodes) + 1);
  return rows <= 65535 && (rows == 0 || vocab <= std::numeric_limits<std::int64_t>::max() / rows);
}

}  // namespace

std::size_t greedy_verification_workspace_bytes(std::int32_t batch, std::int32_t nodes) {
  if (!valid_shape(batch, nodes, 0, 1)) return 0;
  return Workspace::kCountBytes + static_cast<std::size_t>(batch) * (static_cast<std::size_t>(nodes) + 1) * 8;
}

Status greedy_verification(const float* target_rows, const std::int32_t* parents, const TokenId* tokens,
                           const std::int32_t* tree_nodes, std::int32_t* accepted_nodes,
                           std::int32_t* num_accepted, TokenId* emitted, std::int32_t batch, std::int32_t nodes,
                           std::int32_t max_depth, std::int64_t vocab, void* workspace,
                           std::size_t workspace_bytes, void* stream) {
  if (!valid_shape(batch, nodes, max_depth, vocab)) return Status::kInvalidArgument;
  if (batch == 0) return Status::kOk;
  if (target_rows == nullptr || num_accepted == nullptr || emitted == nullptr ||
      (nodes > 0 && (parents == nullptr || tokens == nullptr)) || (max_depth > 0 && accepted_nodes == nullptr) ||
      workspace == nullptr || reinterpret_cast<std::uintptr_t>(workspace) % 16 != 0 ||
      workspace_bytes < greedy_verification_workspace_bytes(batch, nodes))
    return Status::kInvalidArgument;
  // Segments of whole chunks (detail::chunks_per_block).
  const std::int64_t rows = static_cast<std::int64_t>(batch) * (nodes + 1);
  const std::int64_t per_block = kChunk * detail::chunks_per_block(rows, (vocab + kChunk - 1) / kChunk);
  const auto segments = static_cast<unsigned>((vocab + per_block - 1) / per_block);
  greedy_kernel<<<dim3(segments, static_cast<unsigned>(rows)), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      target_rows, parents, tokens, tree_nodes, accepted_nodes, num_accepted, emitted, Workspace::at(workspace),
      nodes, max_depth, vocab, per_block);
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kCudaError;
}

}  // namespace specdec::cuda
