// Block-wide building blocks of the row kernels: one block of kBlock = 1024
// threads works on one vocabulary-wide row. Each computes what a host loop in
// bitexact.hpp or row_math.hpp computes, bit for bit:
//  - block_lane_sum: bitexact::lane_sum (thread l is lane l; warps pair off
//    with shuffles in the host's order).
//  - block_draw: row_math::sample_weights (fixed-point masses, whose integer
//    sums are exact in any order).
//  - block_select_from_top: the largest key whose weight at or above it
//    reaches a target (the k-th largest logit; the last token of a nucleus).
// Every thread of the block must call these together (they synchronise).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "specdec/accept/row_math.hpp"
#include "specdec/core/bitexact.hpp"
#include "specdec/core/types.hpp"

namespace specdec::cuda::detail {

inline constexpr int kBlock = bitexact::kSumLanes;  // 1024: one thread per lane
inline constexpr int kWarps = kBlock / 32;
inline constexpr unsigned kFullMask = 0xffffffffu;
// The widest row block_draw takes: 2048 tiles of 1024 tokens.
inline constexpr std::int64_t kMaxBlockVocab = std::int64_t{1} << 21;

// Shared scratch of the helpers below; one per block, reused call after call.
struct BlockScratch {
  double warp_sums[kWarps];
  std::uint64_t u64[kWarps];
  float f32[kWarps];
  std::int32_t i32[kWarps];
  std::uint64_t hist[2048];  // radix histogram (also tile masses of a draw)
  std::uint64_t broadcast[4];
};

// The sum of v over the 32 lanes of a warp, in bitexact::pair_off_32's order;
// lane 0 holds it.
__device__ __forceinline__ double warp_pair_off(double v) {
  for (int s = 16; s >= 1; s /= 2) v += __shfl_down_sync(kFullMask, v, s);
  return v;
}

__device__ __forceinline__ std::uint64_t warp_sum_u64(std::uint64_t v) {
  for (int s = 16; s >= 1; s /= 2) v += __shfl_down_sync(kFullMask, v, s);
  return v;
}

// One chunk's sum in bitexact::chunk_sum_of's shape, from each thread's lane
// sum (thread l: lane l); returned to every thread.
__device__ inline double block_chunk_sum(double lane_sum, BlockScratch& sh) {
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const double v = warp_pair_off(lane_sum);
  if (lane == 0) sh.warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const double chunk = warp_pair_off(sh.warp_sums[lane]);
    if (lane == 0) sh.broadcast[0] = static_cast<std::uint64_t>(__double_as_longlong(chunk));
  }
  __syncthreads();
  const double sum = __longlong_as_double(static_cast<long long>(sh.broadcast[0]));
  __syncthreads();
  return sum;
}

// bitexact::lane_sum of x(0..n) (x(i) a double; the caller converts exactly as
// the host does). The result is returned to every thread.
template <class X>
__device__ double block_lane_sum(X x, std::int64_t n, BlockScratch& sh) {
  double total = 0.0;  // every thread adds the chunk sums in order
  for (std::int64_t c = 0; c < n; c += bitexact::kSumChunk) {
    double acc = 0.0;
    for (int j = 0; j < 8; ++j) {
      const std::int64_t i = c + j * kBlock + threadIdx.x;
      if (i < n) acc += x(i);
    }
    total += block_chunk_sum(acc, sh);
  }
  return total;
}

// Block-wide reductions, result to every thread.
__device__ inline float block_max(float v, BlockScratch& sh) {
  for (int s = 16; s >= 1; s /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, s));
  if (threadIdx.x % 32 == 0) sh.f32[threadIdx.x / 32] = v;
  __syncthreads();
  float m = sh.f32[0];
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, sh.f32[w]);
  __syncthreads();
  return m;
}

__device__ inline std::uint64_t block_sum_u64(std::uint64_t v, BlockScratch& sh) {
  v = warp_sum_u64(v);
  if (threadIdx.x % 32 == 0) sh.u64[threadIdx.x / 32] = v;
  __syncthreads();
  std::uint64_t s = 0;
  for (int w = 0; w < kWarps; ++w) s += sh.u64[w];
  __syncthreads();
  return s;
}

// One chunk of bitexact.hpp's chunked softmax at inverse temperature inv_t.
// Thread l holds the chunk's logits v[j] = x(l + j * kBlock) (-inf past the
// row's end); e[j] become their exponents against the chunk's largest logit
// (0 below `threshold`). Returns that logit and the chunk's sum of the
// exponents (chunk_sum_of's shape) to every thread.
struct SoftmaxChunk {
  float max;
  double sum;
};
__device__ inline SoftmaxChunk block_softmax_chunk(const float (&v)[8], float threshold, float inv_t,
                                                   float (&e)[8], BlockScratch& sh) {
  float m = v[0];
  for (int j = 1; j < 8; ++j) m = v[j] > m ? v[j] : m;
  m = block_max(m, sh);
  const bool empty = m == -std::numeric_limits<float>::infinity();
  double acc = 0.0;  // adding the padding's 0 leaves a sum of non-negative values unchanged
  for (int j = 0; j < 8; ++j) {
    e[j] = empty || v[j] < threshold ? 0.0f : bitexact::softmax_exponent(v[j], m, inv_t);
    acc += static_cast<double>(e[j]);
  }
  return {m, block_chunk_sum(acc, sh)};
}

// An exclusive prefix sum over the block's threads in thread order; *total
// (every thread) the block's sum.
__device__ inline std::uint64_t block_exclusive_scan_u64(std::uint64_t v, BlockScratch& sh,
                                                         std::uint64_t* total) {
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  std::uint64_t incl = v;
  for (int d = 1; d < 32; d *= 2) {
    const std::uint64_t o = __shfl_up_sync(kFullMask, incl, d);
    if (lane >= d) incl += o;
  }
  if (lane == 31) sh.u64[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const std::uint64_t own = sh.u64[lane];
    std::uint64_t w = own;
    for (int d = 1; d < 32; d *= 2) {
      const std::uint64_t o = __shfl_up_sync(kFullMask, w, d);
      if (lane >= d) w += o;
    }
    sh.hist[lane] = w - own;  // the warps before `lane`
    if (lane == 31) sh.broadcast[0] = w;
  }
  __syncthreads();
  const std::uint64_t before = sh.hist[warp] + incl - v;
  *total = sh.broadcast[0];
  __syncthreads();
  return before;
}

// "The last block": thread 0 wrote this block's results; it fences them and
// counts the block in on `count`. True in every thread of the block that
// brings the count to `total`, which also resets it for the next launch; that
// block may then read every block's results (past the L1: __ldcg). No block
// waits for another, so any grid size is safe.
__device__ inline bool last_block_of(unsigned* count, unsigned total) {
  __shared__ bool last;
  if (threadIdx.x == 0) {
    __threadfence();  // the results before the count
    last = atomicAdd(count, 1u) + 1 == total;
    if (last) *count = 0;
  }
  __syncthreads();
  return last;
}

// The index of the largest value, ties to the lowest index (the host argmax);
// (value, index) pairs under that order form a total order, so any reduction
// tree finds the same one. -1 when n == 0. In the same pass, *non_finite
// (when not null) becomes whether any value is NaN or +inf.
__device__ inline std::int64_t block_argmax(const float* row, std::int64_t n, BlockScratch& sh,
                                            bool* non_finite = nullptr) {
  float best = -std::numeric_limits<float>::infinity();
  std::int64_t at = -1;
  int bad = 0;
  // Eight independent loads in flight per thread, then the comparisons in
  // index order (i increases: ties keep the lowest).
  for (std::int64_t base = threadIdx.x; base < n; base += 8 * kBlock) {
    float v[8];
    for (int j = 0; j < 8; ++j) {
      const std::int64_t i = base + j * kBlock;
      v[j] = i < n ? row[i] : 0.0f;
    }
    for (int j = 0; j < 8; ++j) {
      const std::int64_t i = base + j * kBlock;
      if (i >= n) break;
      bad |= !(v[j] < std::numeric_limits<float>::infinity());
      if (at < 0 || v[j] > best) best = v[j], at = i;
    }
  }
  if (non_finite != nullptr) *non_finite = __syncthreads_or(bad) != 0;
  for (int s = 16; s >= 1; s /= 2) {
    const float ov = __shfl_xor_sync(kFullMask, best, s);
    const auto oi = static_cast<std::int64_t>(__shfl_xor_sync(kFullMask, static_cast<long long>(at), s));
    if (oi >= 0 && (at < 0 || ov > best || (ov == best && oi < at))) best = ov, at = oi;
  }
  if (threadIdx.x % 32 == 0) {
    sh.f32[threadIdx.x / 32] = best;
    sh.u64[threadIdx.x / 32] = static_cast<std::uint64_t>(at);
  }
  __syncthreads();
  best = sh.f32[0];
  at = static_cast<std::int64_t>(sh.u64[0]);
  for (int w = 1; w < kWarps; ++w) {
    const float ov = sh.f32[w];
    const auto oi = static_cast<std::int64_t>(sh.u64[w]);
    if (oi >= 0 && (at < 0 || ov > best || (ov == best && oi < at))) best = ov, at = oi;
  }
  __syncthreads();
  return at;
}

// The inverse-CDF draw of row_math::sample_weights over the weights w(0..n)
// (doubles; fixed_mass is applied here) with uniform u: kNoToken when nothing
// has mass. Integer sums are exact in any order, so the work is split any way
// that is fast:
//  - pass 1: warp v sums tiles v, v + 32, ... of 1024 tokens (lane l reads
//    tokens l, l + 32, ...: coalesced, 32 loads in flight) into hist[tile];
//  - warp 0 finds the tile where the running mass passes the threshold, 32
//    tiles per step;
//  - pass 2: warp 0 finds the token within that tile (lane l holds tokens
//    32 l .. 32 l + 31 of it).
template <class W>
__device__ TokenId block_draw(W w, std::int64_t n, double u, BlockScratch& sh) {
  constexpr std::int64_t kTile = 1024;
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const std::int64_t tiles = (n + kTile - 1) / kTile;  // <= 2048: kMaxBlockVocab
  for (std::int64_t tile = warp; tile < tiles; tile += kWarps) {
    std::uint64_t m = 0;
    const std::int64_t base = tile * kTile + lane;
#pragma unroll 4
    for (int j = 0; j < 32; ++j) {
      const std::int64_t i = base + 32 * j;
      if (i < n) m += bitexact::fixed_mass(w(i));
    }
    m = warp_sum_u64(m);
    if (lane == 0) sh.hist[tile] = m;
  }
  __syncthreads();
  if (warp == 0) {
    std::uint64_t total = 0;
    for (std::int64_t base = 0; base < tiles; base += 32) {
      const std::int64_t tile = base + lane;
      total += warp_sum_u64(tile < tiles ? sh.hist[tile] : 0);
    }
    total = __shfl_sync(kFullMask, total, 0);
    std::int64_t found = -1;
    std::uint64_t local = 0;
    if (total != 0) {
      const std::uint64_t threshold = row_math::draw_threshold(u, total);
      std::uint64_t run = 0;  // the mass of the tiles before `base`
      for (std::int64_t base = 0; base < tiles && found < 0; base += 32) {
        const std::int64_t tile = base + lane;
        const std::uint64_t own = tile < tiles ? sh.hist[tile] : 0;
        std::uint64_t incl = own;
        for (int d = 1; d < 32; d *= 2) {
          const std::uint64_t v = __shfl_up_sync(kFullMask, incl, d);
          if (lane >= d) incl += v;
        }
        const unsigned hits = __ballot_sync(kFullMask, run + incl > threshold);
        if (hits != 0) {
          const int first = __ffs(hits) - 1;  // the first tile whose running mass passes it
          found = base + first;
          local = threshold - (run + __shfl_sync(kFullMask, incl - own, first));
        }
        run += __shfl_sync(kFullMask, incl, 31);
      }
      // Pass 2: the token in tile `found` where its running mass passes `local`.
      const std::int64_t first_token = found * kTile + 32 * lane;
      std::uint64_t mine = 0;
      for (int j = 0; j < 32; ++j)
        if (first_token + j < n) mine += bitexact::fixed_mass(w(first_token + j));
      std::uint64_t incl = mine;
      for (int d = 1; d < 32; d *= 2) {
        const std::uint64_t v = __shfl_up_sync(kFullMask, incl, d);
        if (lane >= d) incl += v;
      }
      const std::uint64_t excl = incl - mine;
      std::int64_t token = -1;
      if (excl <= local && local < incl) {  // exactly one lane
        std::uint64_t acc = excl;
        for (int j = 0; j < 32; ++j) {
          acc += bitexact::fixed_mass(w(first_token + j));
          if (acc > local) {
            token = first_token + j;
            break;
          }
        }
      }
      const unsigned holder = __ballot_sync(kFullMask, token >= 0);
      found = __shfl_sync(kFullMask, token, __ffs(holder) - 1);
    }
    if (lane == 0) sh.broadcast[0] = static_cast<std::uint64_t>(found);
  }
  __syncthreads();
  const auto token = static_cast<std::int64_t>(sh.broadcast[0]);
  __syncthreads();
  return token < 0 ? kNoToken : static_cast<TokenId>(token);
}

// Radix selection from the top: over the keys key(i) of i in [0, n) with
// weights weight(i), the largest key K whose weight at or above it,
// W(>= K), reaches `target`. Three levels of 11, 11 and 10 bits, each one pass
// over the row and a histogram in shared memory. Returns false (the row's
// whole weight is short of target) or true with *key = K and *at_or_above =
// W(>= K).
template <class Key, class Weight>
__device__ bool block_select_from_top(Key key, Weight weight, std::int64_t n, std::uint64_t target,
                                      BlockScratch& sh, std::uint32_t* key_out, std::uint64_t* at_or_above) {
  const int t = threadIdx.x;
  constexpr int kShift[3] = {21, 10, 0};
  constexpr int kBits[3] = {11, 11, 10};
  std::uint32_t prefix = 0;  // the bits of K found so far
  std::uint64_t above = 0;   // the weight of keys above the prefix's range
  std::uint64_t own = 0;     // the weight in the bucket found
  for (int level = 0; level < 3; ++level) {
    const int shift = kShift[level], buckets = 1 << kBits[level];
    const int high = shift + kBits[level];  // bits at and above `high` are the prefix
    for (int b = t; b < buckets; b += kBlock) sh.hist[b] = 0;
    __syncthreads();
    for (std::int64_t i = t; i < n; i += kBlock) {
      const std::uint32_t k = key(i);
      if (high < 32 && (k >> high) != (prefix >> high)) continue;
      const std::uint64_t wgt = weight(i);
      if (wgt != 0)
        atomicAdd(reinterpret_cast<unsigned long long*>(&sh.hist[(k >> shift) & (buckets - 1)]), wgt);
    }
    __syncthreads();
    // The bucket, from the top, where the running weight reaches target:
    // warp 0 scans 64 buckets per step (each lane two) from the top down.
    if (t < 32) {
      std::int32_t found = -1;
      std::uint64_t run = above;
      for (int top = buckets - 1; top >= 0 && found < 0; top -= 64) {
        // Lane l holds buckets top - 2l and top - 2l - 1 (descending order).
        const int b0 = top - 2 * t, b1 = b0 - 1;
        const std::uint64_t w0 = b0 >= 0 ? sh.hist[b0] : 0, w1 = b1 >= 0 ? sh.hist[b1] : 0;
        std::uint64_t incl = w0 + w1;
        for (int s = 1; s < 32; s *= 2) {
          const std::uint64_t v = __shfl_up_sync(kFullMask, incl, s);
          if (t >= s) incl += v;
        }
        const std::uint64_t excl = run + incl - (w0 + w1);
        int mine = -1;
        std::uint64_t mine_above = 0;
        if (b0 >= 0 && excl + w0 >= target)
          mine = b0, mine_above = excl;
        else if (b1 >= 0 && excl + w0 + w1 >= target)
          mine = b1, mine_above = excl + w0;
        const unsigned hits = __ballot_sync(kFullMask, mine >= 0);
        if (hits != 0) {
          const int first = __ffs(hits) - 1;  // the highest bucket that reaches target
          found = __shfl_sync(kFullMask, mine, first);
          const std::uint64_t fa = __shfl_sync(kFullMask, mine_above, first);
          if (t == 0) {
            sh.broadcast[0] = static_cast<std::uint64_t>(found);
            sh.broadcast[1] = fa;
          }
        }
        run += __shfl_sync(kFullMask, incl, 31);
      }
      if (t == 0 && found < 0) sh.broadcast[0] = std::numeric_limits<std::uint64_t>::max();
    }
    __syncthreads();
    const std::uint64_t found = sh.broadcast[0];
    const std::uint64_t new_above = sh.broadcast[1];
    if (found == std::numeric_limits<std::uint64_t>::max()) {
      __syncthreads();
      return false;
    }
    own = sh.hist[found];  // at the last level: the weight of key K itself
    __syncthreads();
    prefix |= static_cast<std::uint32_t>(found) << shift;
    above = new_above;
  }
  *key_out = prefix;
  *at_or_above = above + own;  // W(> K) + W(K)
  return true;
}

}  // namespace specdec::cuda::detail
