// The kernels of cuda::LlamaModel's forward (declared in llama_kernels.hpp).
// Activations, keys, values and sums are f32; weights f32 or bf16 (kept as
// raw 16-bit words, widened by a shift). A decode step is bound by reading
// the weights once, so the projections (linear_rows) give each output column
// to one warp, which streams that weight row once for up to eight activation
// rows at a time in 16-byte loads.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "llama_kernels.hpp"
#include "specdec/core/rng.hpp"

namespace specdec::cuda::detail {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float bf16_to_float(std::uint16_t b) {
  return __uint_as_float(static_cast<unsigned>(b) << 16);
}
// Round to nearest even (NaN stays NaN), as io::f32_to_bf16.
__device__ __forceinline__ std::uint16_t float_to_bf16(float f) {
  const unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float load_weight(const float* w, std::int64_t i) { return w[i]; }
__device__ __forceinline__ float load_weight(const std::uint16_t* w, std::int64_t i) { return bf16_to_float(w[i]); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int s = 16; s >= 1; s /= 2) v += __shfl_xor_sync(kFullMask, v, s);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int s = 16; s >= 1; s /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, s));
  return v;
}

unsigned grid_for(std::int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}
// The launch error the last failed check read (cudaGetLastError clears it).
thread_local cudaError_t last_error = cudaSuccess;
bool launched() {
  last_error = cudaGetLastError();
  return last_error == cudaSuccess;
}
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// ---- weights ------------------------------------------------------------------

__global__ void fill_normal_kernel(void* w, bool bf16, std::int64_t n, double sd, std::uint64_t seed,
                                   std::uint64_t stream) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const PhiloxUniforms u{seed, stream, 0};
  const double u1 = u[static_cast<std::uint64_t>(2 * i)], u2 = u[static_cast<std::uint64_t>(2 * i + 1)];
  const double z = sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
  const auto v = static_cast<float>(sd * z);
  if (bf16)
    static_cast<std::uint16_t*>(w)[i] = float_to_bf16(v);
  else
    static_cast<float*>(w)[i] = v;
}

__global__ void fill_value_kernel(void* w, bool bf16, std::int64_t n, float value) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (bf16)
    static_cast<std::uint16_t*>(w)[i] = float_to_bf16(value);
  else
    static_cast<float*>(w)[i] = value;
}

// ---- rows -----------------------------------------------------------------------

template <class W>
__global__ void embed_kernel(const W* __restrict__ table, const std::int32_t* __restrict__ tokens,
                             std::int64_t hidden, float* __restrict__ x) {
  const std::int64_t t = blockIdx.x;
  const W* row = table + static_cast<std::int64_t>(tokens[t]) * hidden;
  for (std::int64_t i = threadIdx.x; i < hidden; i += blockDim.x) x[t * hidden + i] = load_weight(row, i);
}

constexpr int kNormThreads = 256;

__global__ void __launch_bounds__(kNormThreads) rms_norm_kernel(const float* __restrict__ x,
                                                                const float* __restrict__ weight,
                                                                float* __restrict__ y, std::int64_t hidden,
                                                                float eps) {
  __shared__ float partial[kNormThreads / 32];
  const std::int64_t t = blockIdx.x;
  const float* row = x + t * hidden;
  float s = 0.0f;
  for (std::int64_t i = threadIdx.x; i < hidden; i += kNormThreads) s += row[i] * row[i];
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = s;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kNormThreads / 32; ++w) total += partial[w];
  const float r = rsqrtf(total / static_cast<float>(hidden) + eps);
  for (std::int64_t i = threadIdx.x; i < hidden; i += kNormThreads) y[t * hidden + i] = row[i] * r * weight[i];
}

// ---- projections ----------------------------------------------------------------

constexpr int kLinearWarps = 8;   // output columns per block
constexpr int kLinearRows = 8;    // activation rows per pass over a weight row
constexpr int kLinearRegs = 32;  // registers a lane holds weight chunks in, loaded before any is used

// 8 consecutive floats of a row, from two 16-byte loads; `k` a multiple of 8.
__device__ __forceinline__ void load8(const float* w, std::int64_t k, float out[8]) {
  const float4 a = *reinterpret_cast<const float4*>(w + k);
  const float4 b = *reinterpret_cast<const float4*>(w + k + 4);
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}

// 8 consecutive weights of a row as loaded (one 16-byte word of bf16, two
// of f32), widened to floats only when used: a lane keeps twice as many
// bf16 chunks in flight in the same registers.
template <class W>
struct Chunk;
template <>
struct Chunk<std::uint16_t> {
  static constexpr int kRegs = 4;
  uint4 v;
  __device__ __forceinline__ void load(const std::uint16_t* w, std::int64_t k) {
    v = *reinterpret_cast<const uint4*>(w + k);
  }
  __device__ __forceinline__ void widen(float out[8]) const {
    const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      out[2 * j] = __uint_as_float(words[j] << 16);
      out[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
    }
  }
};
template <>
struct Chunk<float> {
  static constexpr int kRegs = 8;
  float4 a, b;
  __device__ __forceinline__ void load(const float* w, std::int64_t k) {
    a = *reinterpret_cast<const float4*>(w + k);
    b = *reinterpret_cast<const float4*>(w + k + 4);
  }
  __device__ __forceinline__ void widen(float out[8]) const {
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  }
};

// What a projection does around its sums: plain (y = or += x w^T), after an
// RMSNorm of its input rows, or after the norm and with two weight rows per
// column, the SwiGLU gate's and up's: y = silu(x w_g^T) * (x w_u^T).
enum class LinearKind { kPlain, kNorm, kNormGated };

// One warp per output column n: lane l takes the 8-wide chunks l, l + 32, ...
// of the weight row (or single weights when `in` is not a multiple of 8),
// as many as kLinearRegs registers hold (8 per row of bf16) loaded before any
// is used (one at a time, a warp waited on each load's latency: an H200 read
// a 1B-class model's weights at 0.83 TB/s), for up to kLinearRows activation
// rows at a time; then the warp sums its lanes. With a norm, the
// warp first sums each row's squares over the lanes and scales each input
// as the norm would (x * r * g). Each output goes through the same
// operations whatever the forward's row count, so a row's result does not
// depend on the other rows. (Four columns per warp beyond 8 rows, to read
// each activation chunk once for four columns, was tried on an H200:
// batch-64 steps were 6-34% slower, docs/cuda.md.)
template <class W, LinearKind kKind>
__global__ void __launch_bounds__(kLinearWarps * 32)
    linear_kernel(const float* __restrict__ x, const float* __restrict__ norm, float eps,
                  const W* __restrict__ w, float* __restrict__ y, std::int64_t rows, std::int64_t out,
                  std::int64_t in, bool accumulate) {
  constexpr bool kNorm = kKind != LinearKind::kPlain;
  constexpr int kW = kKind == LinearKind::kNormGated ? 2 : 1;  // weight rows per output
  constexpr int kChunks = kLinearRegs / (Chunk<W>::kRegs * kW);  // per weight row
  const std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * kLinearWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= out) return;
  const W* wrow[kW];
  wrow[0] = w + n * in;
  if constexpr (kW == 2) wrow[1] = w + (out + n) * in;
  const bool vec = in % 8 == 0;
  for (std::int64_t m0 = 0; m0 < rows; m0 += kLinearRows) {
    const int mm = static_cast<int>(rows - m0 < kLinearRows ? rows - m0 : kLinearRows);
    // The lane's first weight chunks, loading while the norm sums squares.
    Chunk<W> wk[kW][kChunks];
    const auto load_chunks = [&](std::int64_t k0) {
#pragma unroll
      for (int c = 0; c < kChunks; ++c)
#pragma unroll
        for (int v = 0; v < kW; ++v)
          if (k0 + c * 8 * 32 < in) wk[v][c].load(wrow[v], k0 + c * 8 * 32);
    };
    const std::int64_t first = 8 * static_cast<std::int64_t>(lane);
    if (vec) load_chunks(first);
    float r[kLinearRows];  // each row's norm scale, 1 / sqrt(mean(x^2) + eps)
    if constexpr (kNorm) {
#pragma unroll
      for (int m = 0; m < kLinearRows; ++m) {
        float ss = 0.0f;
        if (m < mm) {
          const float* xr = x + (m0 + m) * in;
          if (vec) {
            for (std::int64_t k = 8 * static_cast<std::int64_t>(lane); k < in; k += 8 * 32) {
              const float4 a = *reinterpret_cast<const float4*>(xr + k);
              const float4 b = *reinterpret_cast<const float4*>(xr + k + 4);
              ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w + b.x * b.x + b.y * b.y + b.z * b.z + b.w * b.w;
            }
          } else {
            for (std::int64_t k = lane; k < in; k += 32) ss += xr[k] * xr[k];
          }
        }
        r[m] = rsqrtf(warp_sum(ss) / static_cast<float>(in) + eps);
      }
    }
    float s[kW][kLinearRows] = {};
    if (vec) {
      for (std::int64_t k0 = first; k0 < in; k0 += 8 * 32 * kChunks) {
        if (k0 != first) load_chunks(k0);
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const std::int64_t k = k0 + c * 8 * 32;
          if (k >= in) continue;
          float wf[kW][8], g[8];
#pragma unroll
          for (int v = 0; v < kW; ++v) wk[v][c].widen(wf[v]);
          if constexpr (kNorm) load8(norm, k, g);
#pragma unroll
          for (int m = 0; m < kLinearRows; ++m) {  // unrolled: s stays in registers
            if (m >= mm) continue;
            float a[8];
            load8(x + (m0 + m) * in, k, a);
            if constexpr (kNorm)
#pragma unroll
              for (int j = 0; j < 8; ++j) a[j] = a[j] * r[m] * g[j];
#pragma unroll
            for (int v = 0; v < kW; ++v)
              s[v][m] += wf[v][0] * a[0] + wf[v][1] * a[1] + wf[v][2] * a[2] + wf[v][3] * a[3] + wf[v][4] * a[4] +
                         wf[v][5] * a[5] + wf[v][6] * a[6] + wf[v][7] * a[7];
          }
        }
      }
    } else {
      for (std::int64_t k = lane; k < in; k += 32) {
        float wk[kW];
#pragma unroll
        for (int v = 0; v < kW; ++v) wk[v] = load_weight(wrow[v], k);
#pragma unroll
        for (int m = 0; m < kLinearRows; ++m) {
          if (m >= mm) continue;
          float a = x[(m0 + m) * in + k];
          if constexpr (kNorm) a = a * r[m] * norm[k];
#pragma unroll
          for (int v = 0; v < kW; ++v) s[v][m] += wk[v] * a;
        }
      }
    }
#pragma unroll
    for (int v = 0; v < kW; ++v)
#pragma unroll
      for (int m = 0; m < kLinearRows; ++m) s[v][m] = warp_sum(s[v][m]);
    if (lane == 0)
#pragma unroll
      for (int m = 0; m < kLinearRows; ++m) {
        if (m >= mm) continue;
        float* dst = y + (m0 + m) * out + n;
        if constexpr (kW == 2) {
          const float gate = s[0][m], up = s[1][m];
          *dst = gate / (1.0f + expf(-gate)) * up;
        } else {
          *dst = accumulate ? *dst + s[0][m] : s[0][m];
        }
      }
  }
}

// ---- attention ------------------------------------------------------------------

constexpr int kRopeThreads = 128;

__device__ __forceinline__ void rope_pair(const float* src, float* dst, const float* cos, const float* sin,
                                          std::int32_t half, std::int32_t i) {
  const float x1 = src[i], x2 = src[i + half];
  dst[i] = x1 * cos[i] - x2 * sin[i];
  dst[i + half] = x2 * cos[i + half] + x1 * sin[i + half];
}

__global__ void __launch_bounds__(kRopeThreads)
    rope_and_store_kernel(float* __restrict__ qkv, const TokenPlan* __restrict__ plan, const float* __restrict__ cos,
                          const float* __restrict__ sin, float* const* __restrict__ k_slots,
                          float* const* __restrict__ v_slots, std::int32_t layer, AttentionShape s) {
  const std::int64_t t = blockIdx.x;
  const TokenPlan p = plan[t];
  const std::int32_t hd = s.head_dim, half = hd / 2;
  const std::int64_t q_dim = static_cast<std::int64_t>(s.heads) * hd;
  const std::int64_t kv_dim = static_cast<std::int64_t>(s.kv_heads) * hd;
  float* q = qkv + t * (q_dim + 2 * kv_dim);
  const float* k = q + q_dim;
  const float* v = k + kv_dim;
  const float* c = cos + static_cast<std::int64_t>(p.position) * hd;
  const float* sn = sin + static_cast<std::int64_t>(p.position) * hd;
  for (std::int64_t e = threadIdx.x; e < static_cast<std::int64_t>(s.heads) * half; e += kRopeThreads) {
    const auto h = static_cast<std::int32_t>(e / half), i = static_cast<std::int32_t>(e % half);
    rope_pair(q + h * hd, q + h * hd, c, sn, half, i);
  }
  // Keys and values: head h of the row into row write_row of layer `layer`.
  float* kc = k_slots[p.slot];
  float* vc = v_slots[p.slot];
  for (std::int64_t e = threadIdx.x; e < static_cast<std::int64_t>(s.kv_heads) * half; e += kRopeThreads) {
    const auto h = static_cast<std::int32_t>(e / half), i = static_cast<std::int32_t>(e % half);
    float* dst = kc + ((static_cast<std::int64_t>(layer) * s.kv_heads + h) * p.capacity + p.write_row) * hd;
    rope_pair(k + h * hd, dst, c, sn, half, i);
  }
  for (std::int64_t e = threadIdx.x; e < kv_dim; e += kRopeThreads) {
    const auto h = static_cast<std::int32_t>(e / hd), i = static_cast<std::int32_t>(e % hd);
    vc[((static_cast<std::int64_t>(layer) * s.kv_heads + h) * p.capacity + p.write_row) * hd + i] = v[e];
  }
}

constexpr int kAttnWarps = 8;
constexpr int kAttnThreads = kAttnWarps * 32;
constexpr int kAttnChunk = 1024;  // keys scored per pass (online softmax between passes)
constexpr int kAttnKeys = 16;     // keys whose loads a warp has in flight at once when scoring
constexpr int kAttnRegs = 32;     // registers a lane holds value rows in, loaded before any is used

__device__ __forceinline__ bool visible(const TokenPlan& p, const std::uint64_t* mask_words, std::int64_t key) {
  if (key < p.prefix || p.mask_word < 0) return true;
  const std::int64_t j = key - p.prefix;
  return (mask_words[p.mask_word + j / 64] >> (j % 64)) & 1u;
}

// One block per (row, query head). Per chunk of keys: the scores in shared
// memory (a warp per key, lanes over the head's dimensions), the chunk's
// softmax folded into the running max and sum, and the values weighted by
// it: warp w takes the keys w, w + kAttnWarps, ... in order, lane l the
// dimensions l, l + 32, ...; the warps' sums are added in warp order at the
// end. A row's result depends only on the keys it sees and their places in
// the cache, not on the other rows of the forward. kDims: the dimensions a
// lane holds, head_dim <= 32 kDims.
template <int kDims>
__global__ void __launch_bounds__(kAttnThreads, 2)
    attention_kernel(const float* __restrict__ qkv, const TokenPlan* __restrict__ plan,
                     const std::uint64_t* __restrict__ mask_words, const float* const* __restrict__ k_slots,
                     const float* const* __restrict__ v_slots, std::int32_t layer, AttentionShape s,
                     float* __restrict__ out) {
  __shared__ float q[kMaxHeadDim];
  __shared__ float scores[kAttnChunk];
  __shared__ float red[kAttnWarps];
  __shared__ float partial[kAttnWarps][kMaxHeadDim];
  const std::int64_t t = blockIdx.x / s.heads;
  const std::int32_t h = static_cast<std::int32_t>(blockIdx.x % s.heads);
  const std::int32_t kvh = h / (s.heads / s.kv_heads);
  const TokenPlan p = plan[t];
  const std::int32_t hd = s.head_dim;
  const std::int64_t q_dim = static_cast<std::int64_t>(s.heads) * hd;
  const std::int64_t kv_dim = static_cast<std::int64_t>(s.kv_heads) * hd;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int d = tid; d < hd; d += kAttnThreads) q[d] = qkv[t * (q_dim + 2 * kv_dim) + h * hd + d];
  const std::int64_t head_base = (static_cast<std::int64_t>(layer) * s.kv_heads + kvh) * p.capacity;
  const float* kc = k_slots[p.slot] + head_base * hd;
  const float* vc = v_slots[p.slot] + head_base * hd;
  const float scale = rsqrtf(static_cast<float>(hd));
  const std::int64_t keys = static_cast<std::int64_t>(p.prefix) + p.window;
  float running_max = -INFINITY, running_sum = 0.0f;
  constexpr int kValues = kAttnRegs / kDims < 8 ? kAttnRegs / kDims : 8;  // value rows in flight per warp
  float acc[kDims] = {};                        // this warp's weighted values, dimensions lane + 32 i
  __syncthreads();
  for (std::int64_t c0 = 0; c0 < keys; c0 += kAttnChunk) {
    const int cn = static_cast<int>(keys - c0 < kAttnChunk ? keys - c0 : kAttnChunk);
    // A warp scores kAttnKeys keys per pass, their loads issued together
    // (one key at a time waited on each load's latency); each key's sum is
    // the same as one at a time.
    for (int j0 = warp; j0 < cn; j0 += kAttnKeys * kAttnWarps) {
      float dot[kAttnKeys];
      bool seen[kAttnKeys];
#pragma unroll
      for (int u = 0; u < kAttnKeys; ++u) {
        const int j = j0 + u * kAttnWarps;
        seen[u] = j < cn && visible(p, mask_words, c0 + j);
        dot[u] = 0.0f;
        if (seen[u]) {
          const float* kr = kc + (c0 + j) * hd;
#pragma unroll
          for (int i = 0; i < kDims; ++i)
            if (lane + 32 * i < hd) dot[u] += q[lane + 32 * i] * kr[lane + 32 * i];
        }
      }
#pragma unroll
      for (int u = 0; u < kAttnKeys; ++u) {
        const int j = j0 + u * kAttnWarps;
        const float score = seen[u] ? warp_sum(dot[u]) * scale : -INFINITY;
        if (lane == 0 && j < cn) scores[j] = score;
      }
    }
    __syncthreads();
    float m = -INFINITY;
    for (int j = tid; j < cn; j += kAttnThreads) m = fmaxf(m, scores[j]);
    m = warp_max(m);
    if (lane == 0) red[warp] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < kAttnWarps; ++w) m = fmaxf(m, red[w]);
    __syncthreads();
    const float new_max = fmaxf(running_max, m);
    if (new_max != -INFINITY) {  // else every key so far is hidden
      const float correction = running_max == -INFINITY ? 0.0f : expf(running_max - new_max);
      float part = 0.0f;
      for (int j = tid; j < cn; j += kAttnThreads) {
        const float e = scores[j] == -INFINITY ? 0.0f : expf(scores[j] - new_max);
        scores[j] = e;
        part += e;
      }
      part = warp_sum(part);
      if (lane == 0) red[warp] = part;
      __syncthreads();
      float chunk_sum = 0.0f;
      for (int w = 0; w < kAttnWarps; ++w) chunk_sum += red[w];
      running_sum = running_sum * correction + chunk_sum;
#pragma unroll
      for (int i = 0; i < kDims; ++i) acc[i] *= correction;
      // This warp's keys, kValues value rows' loads in flight at a time;
      // a hidden key (weight 0) is skipped, not added as 0 * value.
      for (int j0 = warp; j0 < cn; j0 += kValues * kAttnWarps) {
        float pj[kValues], v[kValues][kDims];
#pragma unroll
        for (int u = 0; u < kValues; ++u) {
          const int j = j0 + u * kAttnWarps;
          pj[u] = j < cn ? scores[j] : 0.0f;
          const float* vr = vc + (c0 + j) * hd;
#pragma unroll
          for (int i = 0; i < kDims; ++i) {
            const int d = lane + 32 * i;
            v[u][i] = pj[u] != 0.0f && d < hd ? vr[d] : 0.0f;
          }
        }
#pragma unroll
        for (int u = 0; u < kValues; ++u) {
          if (pj[u] == 0.0f) continue;
#pragma unroll
          for (int i = 0; i < kDims; ++i) acc[i] += pj[u] * v[u][i];
        }
      }
      running_max = new_max;
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kDims; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) partial[warp][d] = acc[i];
  }
  __syncthreads();
  const float inv = running_sum > 0.0f ? 1.0f / running_sum : 0.0f;
  float* o = out + t * q_dim + h * hd;
  for (int d = tid; d < hd; d += kAttnThreads) {
    float sum = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) sum += partial[w][d];
    o[d] = sum * inv;
  }
}

// One block per (layer, kv head) and per keys / values; the moves in order
// (plan_accept orders them so that no source is overwritten before it is
// read).
__global__ void compact_kernel(float* __restrict__ k, float* __restrict__ v, std::int64_t capacity,
                               const CacheMove* __restrict__ moves, std::int32_t n,
                               float* __restrict__ sink_keys, std::int32_t sink, std::int32_t head_dim) {
  const bool keys = blockIdx.y == 0;
  float* base = (keys ? k : v) + static_cast<std::int64_t>(blockIdx.x) * capacity * head_dim;
  for (std::int32_t i = 0; i < n; ++i) {
    const CacheMove m = moves[i];
    const std::int64_t from = m.from, to = m.to;
    if (keys && m.sink_row >= 0)
      for (int d = threadIdx.x; d < head_dim; d += blockDim.x)
        sink_keys[(static_cast<std::int64_t>(blockIdx.x) * sink + m.sink_row) * head_dim + d] =
            base[from * head_dim + d];
    if (from != to)
      for (int d = threadIdx.x; d < head_dim; d += blockDim.x) base[to * head_dim + d] = base[from * head_dim + d];
    __syncthreads();
  }
}

// One block per (layer, kv head): row s < count of its keys = the sink key s
// rotated by `shift` (cos/sin at position shift).
__global__ void shift_sink_kernel(float* __restrict__ k, std::int64_t capacity,
                                  const float* __restrict__ sink_keys, std::int32_t sink, std::int32_t count,
                                  const float* __restrict__ cos, const float* __restrict__ sin,
                                  std::int32_t head_dim) {
  const std::int32_t half = head_dim / 2;
  float* base = k + static_cast<std::int64_t>(blockIdx.x) * capacity * head_dim;
  const float* src = sink_keys + static_cast<std::int64_t>(blockIdx.x) * sink * head_dim;
  for (std::int32_t e = threadIdx.x; e < count * half; e += blockDim.x) {
    const std::int32_t s = e / half, i = e % half;
    rope_pair(src + static_cast<std::int64_t>(s) * head_dim, base + static_cast<std::int64_t>(s) * head_dim,
              cos, sin, half, i);
  }
}

}  // namespace

bool fill_normal(void* w, bool bf16, std::int64_t n, double sd, std::uint64_t seed, std::uint64_t stream,
                 void* cuda_stream) {
  if (n <= 0) return true;
  fill_normal_kernel<<<grid_for(n, 256), 256, 0, as_stream(cuda_stream)>>>(w, bf16, n, sd, seed,
                                                                         stream);
  return launched();
}

bool fill_value(void* w, bool bf16, std::int64_t n, float value, void* cuda_stream) {
  if (n <= 0) return true;
  fill_value_kernel<<<grid_for(n, 256), 256, 0, as_stream(cuda_stream)>>>(w, bf16, n, value);
  return launched();
}

bool embed_rows(const void* table, bool bf16, const std::int32_t* tokens, std::int64_t rows, std::int64_t hidden,
                float* x, void* stream) {
  if (rows <= 0) return true;
  if (bf16)
    embed_kernel<<<static_cast<unsigned>(rows), 256, 0, as_stream(stream)>>>(
        static_cast<const std::uint16_t*>(table), tokens, hidden, x);
  else
    embed_kernel<<<static_cast<unsigned>(rows), 256, 0, as_stream(stream)>>>(static_cast<const float*>(table), tokens,
                                                                            hidden, x);
  return launched();
}

bool rms_norm_rows(const float* x, const float* weight, float* y, std::int64_t rows, std::int64_t hidden, float eps,
                   void* stream) {
  if (rows <= 0) return true;
  rms_norm_kernel<<<static_cast<unsigned>(rows), kNormThreads, 0, as_stream(stream)>>>(x, weight, y, hidden, eps);
  return launched();
}

namespace {
template <LinearKind kKind>
bool launch_linear(const float* x, const float* norm, float eps, const void* w, bool bf16, float* y,
                   std::int64_t rows, std::int64_t out, std::int64_t in, bool accumulate, void* stream) {
  if (rows <= 0 || out <= 0) return true;
  const unsigned blocks = grid_for(out, kLinearWarps);
  if (bf16)
    linear_kernel<std::uint16_t, kKind><<<blocks, kLinearWarps * 32, 0, as_stream(stream)>>>(
        x, norm, eps, static_cast<const std::uint16_t*>(w), y, rows, out, in, accumulate);
  else
    linear_kernel<float, kKind><<<blocks, kLinearWarps * 32, 0, as_stream(stream)>>>(
        x, norm, eps, static_cast<const float*>(w), y, rows, out, in, accumulate);
  return launched();
}
}  // namespace

bool linear_rows(const float* x, const void* w, bool bf16, float* y, std::int64_t rows, std::int64_t out,
                 std::int64_t in, bool accumulate, void* stream) {
  return launch_linear<LinearKind::kPlain>(x, nullptr, 0.0f, w, bf16, y, rows, out, in, accumulate, stream);
}

bool norm_linear_rows(const float* x, const float* norm, float eps, const void* w, bool bf16, float* y,
                      std::int64_t rows, std::int64_t out, std::int64_t in, void* stream) {
  return launch_linear<LinearKind::kNorm>(x, norm, eps, w, bf16, y, rows, out, in, false, stream);
}

bool norm_swiglu_rows(const float* x, const float* norm, float eps, const void* w, bool bf16, float* y,
                      std::int64_t rows, std::int64_t inner, std::int64_t in, void* stream) {
  return launch_linear<LinearKind::kNormGated>(x, norm, eps, w, bf16, y, rows, inner, in, false, stream);
}

bool rope_and_store(float* qkv, const TokenPlan* plan, std::int64_t rows, const float* cos, const float* sin,
                    float* const* k_slots, float* const* v_slots, std::int32_t layer, const AttentionShape& shape,
                    void* stream) {
  if (rows <= 0) return true;
  rope_and_store_kernel<<<static_cast<unsigned>(rows), kRopeThreads, 0, as_stream(stream)>>>(
      qkv, plan, cos, sin, k_slots, v_slots, layer, shape);
  return launched();
}

bool attention_rows(const float* qkv, const TokenPlan* plan, const std::uint64_t* mask_words, std::int64_t rows,
                    const float* const* k_slots, const float* const* v_slots, std::int32_t layer,
                    const AttentionShape& shape, float* out, void* stream) {
  if (rows <= 0) return true;
  const auto blocks = static_cast<unsigned>(rows * shape.heads);
  if (shape.head_dim <= 64)
    attention_kernel<2><<<blocks, kAttnThreads, 0, as_stream(stream)>>>(qkv, plan, mask_words, k_slots, v_slots,
                                                                        layer, shape, out);
  else if (shape.head_dim <= 128)
    attention_kernel<4><<<blocks, kAttnThreads, 0, as_stream(stream)>>>(qkv, plan, mask_words, k_slots, v_slots,
                                                                        layer, shape, out);
  else
    attention_kernel<kMaxHeadDim / 32><<<blocks, kAttnThreads, 0, as_stream(stream)>>>(
        qkv, plan, mask_words, k_slots, v_slots, layer, shape, out);
  return launched();
}

bool compact_cache(float* k, float* v, std::int64_t capacity, const CacheMove* moves, std::int32_t n,
                   float* sink_keys, std::int32_t sink, const AttentionShape& shape, void* stream) {
  if (n <= 0) return true;
  const dim3 grid(static_cast<unsigned>(shape.layers * shape.kv_heads), 2);
  compact_kernel<<<grid, 128, 0, as_stream(stream)>>>(k, v, capacity, moves, n, sink_keys, sink,
                                                      shape.head_dim);
  return launched();
}

bool shift_sink(float* k, std::int64_t capacity, const float* sink_keys, std::int32_t sink,
                std::int32_t count, std::int64_t shift, const float* cos, const float* sin,
                const AttentionShape& shape, void* stream) {
  if (count <= 0) return true;
  const auto at = shift * shape.head_dim;
  shift_sink_kernel<<<static_cast<unsigned>(shape.layers * shape.kv_heads), 128, 0, as_stream(stream)>>>(
      k, capacity, sink_keys, sink, count, cos + at, sin + at, shape.head_dim);
  return launched();
}

const char* last_launch_error() { return cudaGetErrorString(last_error); }

}  // namespace specdec::cuda::detail
