// Chain speculative sampling from the target's logits, warping fused with the
// rule (Leviathan et al., arXiv 2211.17192, Algorithm 1), in two launches
// whose blocks work on chunks of 8192 logits of one row, so that even a batch
// of one spreads over the SMs:
//  1. stats_and_tests_kernel: each block computes the softmax statistics of
//     its chunks (one at batch 1; a whole row at large batches), in
//     bitexact.hpp's chunked softmax: each chunk's largest logit and its sum
//     of exponents, at temperature 0 its argmax. The last block
//     of a request to finish combines them into each row's normaliser and
//     runs the acceptance tests, which need p(x) at the drafted tokens only.
//  2. draw_kernel: each block sums the fixed-point masses of its chunk of the
//     row the request stopped at (the residual after a rejection, else p);
//     the last block of the request finds the chunk, then the token, where
//     the running mass passes the draw's threshold (p's masses too, should
//     rounding have left the residual empty).
// p(i) is computed where needed, exactly as warp_rows writes it, so the tokens
// are those of warp_rows + chain_speculative_sampling (the host Warper +
// row_math::chain_speculative_sampling_row). The logits are read once, plus
// the stopping row and its draft row again.
//
// "The last block of a request": detail::last_block_of (block_math.cuh).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <limits>

#include "block_math.cuh"
#include "launch_checks.hpp"
#include "specdec/accept/row_math.hpp"
#include "specdec/core/bitexact.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/cuda/chain_speculative_sampling.hpp"

namespace specdec::cuda {
namespace {

using detail::BlockScratch;
using detail::kBlock;
constexpr std::int64_t kChunk = bitexact::kSumChunk;
constexpr std::int32_t kMaxRows = 32;                        // gamma + 1 rows per request
constexpr std::int64_t kMaxVocab = std::int64_t{1} << 18;    // 32 chunks a row
constexpr std::int32_t kMaxChunks = static_cast<std::int32_t>(kMaxVocab / kChunk);
constexpr float kInf = std::numeric_limits<float>::infinity();

// One chunk of one target row.
struct ChunkStat {
  double sum;           // s_c, the chunk's sum of exponents (temperature > 0)
  float max;            // m_c, its largest logit
  std::int32_t argmax;  // the lowest token holding m_c; -1: the chunk holds a NaN or +inf
};

// One request after its acceptance tests.
struct Decision {
  double normaliser;    // Z of the row drawn from
  float row_max;        // M of that row
  std::int32_t stop;    // the row drawn from (< gamma: a rejection; gamma: the bonus); -1: nothing to draw
  std::int32_t argmax;  // that row's argmax (temperature 0)
  std::int32_t unused;
};

// Fixed-point masses of one chunk of the row drawn from.
struct ChunkMass {
  std::uint64_t residual;  // max(0, p - q), or p without the drafted token
  std::uint64_t target;    // p
};

constexpr std::size_t align16(std::size_t n) { return (n + 15) / 16 * 16; }

// The workspace: first two counters per request for every request a launch
// can have (so that they stay where they are, and zero, whatever shapes later
// launches have), then the per-launch arrays.
constexpr std::int64_t kMaxRequests = 65535;
struct Workspace {
  unsigned* counts;     // [kMaxRequests, 2]: phase 1, phase 2
  ChunkStat* stats;     // [batch, gamma + 1, chunks]
  Decision* decisions;  // [batch]
  ChunkMass* masses;    // [batch, chunks]

  static constexpr std::size_t kCountBytes = align16(kMaxRequests * 2 * sizeof(unsigned));
  static std::size_t bytes(std::int64_t batch, std::int64_t rows, std::int64_t chunks) {
    return kCountBytes + align16(static_cast<std::size_t>(batch * rows * chunks) * sizeof(ChunkStat)) +
           align16(static_cast<std::size_t>(batch) * sizeof(Decision)) +
           align16(static_cast<std::size_t>(batch * chunks) * sizeof(ChunkMass));
  }
  static Workspace at(void* base, std::int64_t batch, std::int64_t rows, std::int64_t chunks) {
    auto* p = static_cast<char*>(base);
    Workspace w{};
    w.counts = reinterpret_cast<unsigned*>(p);
    p += kCountBytes;
    w.stats = reinterpret_cast<ChunkStat*>(p);
    p += align16(static_cast<std::size_t>(batch * rows * chunks) * sizeof(ChunkStat));
    w.decisions = reinterpret_cast<Decision*>(p);
    p += align16(static_cast<std::size_t>(batch) * sizeof(Decision));
    w.masses = reinterpret_cast<ChunkMass*>(p);
    return w;
  }
};

__device__ std::uint64_t load_cg(const std::uint64_t* p) {
  return __ldcg(reinterpret_cast<const unsigned long long*>(p));
}

__device__ bool sampled(float temperature) { return temperature > 0.0f && temperature < kInf; }

// p(i) for token c0 + k of a chunk whose largest logit is m_c, as warp_rows
// writes it: the exponent against m_c times the chunk's factor.
__device__ float target_prob(float logit, float chunk_max, float inv_t, float factor) {
  return chunk_max == -kInf ? 0.0f : bitexact::mul_rn(bitexact::softmax_exponent(logit, chunk_max, inv_t), factor);
}

// Phase 1, the last block of a request: combine the chunks into each row's
// largest logit, normaliser and argmax, run the tests, and write the
// accepted drafts and the decision. Each step is spread over the threads
// (a chunk, a row or a draft each), so that one thread's chain of dependent
// instructions stays short; thread 0 only finds the first rejection.
__device__ __noinline__ void decide(const float* __restrict__ logits, const float* __restrict__ draft_probs,
                                    const TokenId* __restrict__ tokens, float temperature, TokenId* __restrict__ out,
                                    std::int32_t* __restrict__ num_accepted, const ChunkStat* stats,
                                    Decision* decision, std::int32_t gamma, std::int64_t vocab, std::int32_t chunks,
                                    PhiloxUniforms uniforms) {
  __shared__ double sum[kMaxRows * kMaxChunks];
  __shared__ float max[kMaxRows * kMaxChunks], scale[kMaxRows * kMaxChunks];
  __shared__ std::int32_t arg[kMaxRows * kMaxChunks];
  __shared__ double row_z[kMaxRows], u[kMaxRows];
  __shared__ float row_m[kMaxRows], drafted_logit[kMaxRows], drafted_q[kMaxRows];
  __shared__ std::int32_t row_arg[kMaxRows];
  __shared__ bool row_bad[kMaxRows], accepted[kMaxRows], tokens_ok;
  const int t = threadIdx.x;
  const std::int32_t rows = gamma + 1, entries = rows * chunks;
  const float inv_t = sampled(temperature) ? 1.0f / temperature : 1.0f;
  if (t == 0) tokens_ok = true;
  __syncthreads();
  // Other blocks wrote the stats: read them past the (incoherent) L1.
  for (std::int32_t e = t; e < entries; e += kBlock) {
    sum[e] = __ldcg(&stats[e].sum);
    max[e] = __ldcg(&stats[e].max);
    arg[e] = __ldcg(&stats[e].argmax);
  }
  if (t < gamma) {  // draft t: its token, p's logit and q at it, its uniform
    const TokenId x = tokens[t];
    if (x < 0 || x >= vocab) {
      tokens_ok = false;
    } else {
      drafted_logit[t] = logits[static_cast<std::int64_t>(t) * vocab + x];
      drafted_q[t] = draft_probs == nullptr ? 1.0f : draft_probs[static_cast<std::int64_t>(t) * vocab + x];
    }
    u[t] = uniforms[static_cast<std::uint64_t>(t)];
  }
  __syncthreads();
  if (t < rows) {  // row t: its largest logit and argmax (chunks in order: ties keep the lowest token)
    float m = -kInf;
    std::int32_t a = -1;
    bool bad = false;
    for (std::int32_t c = 0; c < chunks; ++c) {
      const std::int32_t e = t * chunks + c;
      bad |= arg[e] < 0;
      if (a < 0 || max[e] > m) m = max[e], a = arg[e];
    }
    row_m[t] = m, row_arg[t] = a, row_bad[t] = bad || m == -kInf;
  }
  __syncthreads();
  for (std::int32_t e = t; e < entries; e += kBlock)
    scale[e] = bitexact::softmax_chunk_scale(max[e], row_m[e / chunks], inv_t);
  __syncthreads();
  if (t < rows) {  // row t's normaliser, its chunks in order
    double z = 0.0;
    for (std::int32_t c = 0; c < chunks; ++c) z = bitexact::softmax_normaliser_add(z, sum[t * chunks + c], scale[t * chunks + c]);
    row_z[t] = z;
  }
  __syncthreads();
  if (t < gamma && tokens_ok) {  // draft t's test
    const TokenId x = tokens[t];
    float p_x = x == row_arg[t] ? 1.0f : 0.0f;
    if (sampled(temperature)) {
      const std::int32_t e = t * chunks + static_cast<std::int32_t>(x / kChunk);
      p_x = target_prob(drafted_logit[t], max[e], inv_t, bitexact::softmax_chunk_factor(scale[e], row_z[t]));
    }
    accepted[t] = row_math::accept_draft(p_x, drafted_q[t], u[t]);
  }
  __syncthreads();
  if (t != 0) return;
  bool flagged = !tokens_ok || !(temperature >= 0.0f && temperature < kInf);
  for (std::int32_t i = 0; i < rows; ++i) flagged |= row_bad[i];
  if (flagged) {
    for (std::int32_t j = 0; j < rows; ++j) out[j] = kNoToken;
    *num_accepted = -1;
    decision->stop = -1;
    return;
  }
  std::int32_t i = 0;
  for (; i < gamma && accepted[i]; ++i) out[i] = tokens[i];
  for (std::int32_t j = i + 1; j < rows; ++j) out[j] = kNoToken;
  *num_accepted = i;
  decision->stop = i;
  decision->row_max = row_m[i];
  decision->normaliser = row_z[i];
  decision->argmax = row_arg[i];
}

// Block (s, row) computes chunks [s * per_block, (s + 1) * per_block) of the
// row; two blocks share an SM, one loading while the other reduces.
__global__ void __launch_bounds__(kBlock, 2) stats_and_tests_kernel(
    const float* __restrict__ logits, const float* __restrict__ draft_probs, const TokenId* __restrict__ tokens,
    const float* __restrict__ temperatures, TokenId* __restrict__ out, std::int32_t* __restrict__ num_accepted,
    Workspace ws, std::int32_t gamma, std::int64_t vocab, std::int32_t chunks, std::int32_t per_block,
    std::uint64_t seed, std::uint64_t offset, const PhiloxUniforms* __restrict__ tree_streams) {
  __shared__ BlockScratch sh;
  const int t = threadIdx.x;
  const std::int32_t rows = gamma + 1;
  const std::int64_t row = blockIdx.y;  // b * rows + i
  const auto b = static_cast<std::int32_t>(row / rows);
  const float temperature = temperatures[b];
  const float* x = logits + row * vocab;
  const std::int32_t first = static_cast<std::int32_t>(blockIdx.x) * per_block;
  const std::int32_t last = first + per_block < chunks ? first + per_block : chunks;

  for (std::int32_t c = first; c < last; ++c) {
    const std::int64_t c0 = c * kChunk;
    float v[8];
    int bad = 0;
    for (int j = 0; j < 8; ++j) {
      const std::int64_t k = c0 + j * kBlock + t;
      v[j] = k < vocab ? x[k] : -kInf;
      bad |= !(v[j] < kInf);
    }
    ChunkStat stat{0.0, 0.0f, -1};
    if (!__syncthreads_or(bad)) {
      if (sampled(temperature)) {
        float e[8];
        const detail::SoftmaxChunk chunk = detail::block_softmax_chunk(v, -kInf, 1.0f / temperature, e, sh);
        stat = {chunk.sum, chunk.max, 0};
      } else {
        const std::int64_t a = c0 + detail::block_argmax(x + c0, vocab - c0 < kChunk ? vocab - c0 : kChunk, sh);
        stat = {0.0, x[a], static_cast<std::int32_t>(a)};
      }
    }
    if (t == 0) ws.stats[row * chunks + c] = stat;
  }
  const auto segments = static_cast<unsigned>((chunks + per_block - 1) / per_block);
  if (!detail::last_block_of(&ws.counts[2 * b], static_cast<unsigned>(rows) * segments)) return;
  const std::int64_t first_row = static_cast<std::int64_t>(b) * rows;
  decide(logits + first_row * vocab,
         draft_probs == nullptr ? nullptr : draft_probs + static_cast<std::int64_t>(b) * gamma * vocab,
         tokens + static_cast<std::int64_t>(b) * gamma, temperature, out + first_row, num_accepted + b,
         ws.stats + first_row * chunks, ws.decisions + b, gamma, vocab, chunks,
         detail::tree_uniforms(tree_streams, seed, b, offset));
}

__global__ void __launch_bounds__(kBlock, 2) draw_kernel(const float* __restrict__ logits,
                                                     const float* __restrict__ draft_probs,
                                                     const TokenId* __restrict__ tokens,
                                                     const float* __restrict__ temperatures,
                                                     TokenId* __restrict__ out, Workspace ws, std::int32_t gamma,
                                                     std::int64_t vocab, std::int32_t chunks, std::uint64_t seed,
                                                     std::uint64_t offset,
                                                     const PhiloxUniforms* __restrict__ tree_streams) {
  __shared__ BlockScratch sh;
  __shared__ std::int64_t found_chunk;
  __shared__ std::uint64_t local_threshold;
  __shared__ bool draw_residual;
  const int t = threadIdx.x;
  const std::int32_t b = blockIdx.y;
  const Decision d = ws.decisions[b];
  if (d.stop < 0) return;  // flagged by phase 1: every block of the request returns
  const std::int32_t rows = gamma + 1;
  const std::int64_t row = static_cast<std::int64_t>(b) * rows + d.stop;
  const float* p_row = logits + row * vocab;
  const bool rejected = d.stop < gamma;
  const float* q_row = rejected && draft_probs != nullptr
                           ? draft_probs + (static_cast<std::int64_t>(b) * gamma + d.stop) * vocab
                           : nullptr;
  const TokenId drafted = rejected ? tokens[static_cast<std::int64_t>(b) * gamma + d.stop] : kNoToken;
  const float temperature = temperatures[b];
  const float inv_t = sampled(temperature) ? 1.0f / temperature : 1.0f;
  const ChunkStat* stats = ws.stats + row * chunks;

  // p(k) and the residual weight at token k of chunk c, as the host computes them.
  const auto p_of = [&](std::int64_t k, float chunk_max, float factor) {
    if (!sampled(temperature)) return k == d.argmax ? 1.0f : 0.0f;
    return target_prob(p_row[k], chunk_max, inv_t, factor);
  };
  const auto residual_of = [&](std::int64_t k, float p) {
    if (q_row != nullptr) return static_cast<double>(p) - static_cast<double>(q_row[k]);
    return k == drafted ? 0.0 : static_cast<double>(p);
  };
  const auto chunk_factor = [&](float chunk_max) {
    return bitexact::softmax_chunk_factor(bitexact::softmax_chunk_scale(chunk_max, d.row_max, inv_t),
                                          d.normaliser);
  };

  // Chunk c's mass: of the residual after a rejection, else of p.
  const auto chunk_mass = [&](std::int64_t c, bool residual) {
    const std::int64_t c0 = c * kChunk;
    const std::int64_t n = vocab - c0 < kChunk ? vocab - c0 : kChunk;
    const float chunk_max = stats[c].max;
    const float factor = chunk_factor(chunk_max);
    std::uint64_t mass = 0;
    for (int j = 0; j < 8; ++j) {
      const std::int64_t k = c0 + j * kBlock + t;
      if (k >= c0 + n) break;
      const float p = p_of(k, chunk_max, factor);
      mass += bitexact::fixed_mass(residual ? residual_of(k, p) : static_cast<double>(p));
    }
    return detail::block_sum_u64(mass, sh);
  };
  {
    const std::uint64_t mass = chunk_mass(blockIdx.x, rejected);
    if (t == 0)
      ws.masses[static_cast<std::int64_t>(b) * chunks + blockIdx.x] =
          rejected ? ChunkMass{mass, 0} : ChunkMass{0, mass};
  }
  if (!detail::last_block_of(&ws.counts[2 * b + 1], static_cast<unsigned>(chunks))) return;

  // The last block: the chunk where the running mass passes the threshold
  // (thread 0, over at most 32 chunks), then the token within it.
  // The chunks' masses, loaded in parallel (one round trip), past the L1.
  __shared__ std::uint64_t residual_mass[kMaxChunks], target_mass[kMaxChunks];
  __shared__ bool empty_residual;
  const ChunkMass* masses = ws.masses + static_cast<std::int64_t>(b) * chunks;
  if (t < chunks) {
    residual_mass[t] = load_cg(&masses[t].residual);
    target_mass[t] = load_cg(&masses[t].target);
  }
  __syncthreads();
  if (t == 0) {
    std::uint64_t residual = 0;
    for (std::int32_t c = 0; c < chunks; ++c) residual += residual_mass[c];
    empty_residual = rejected && residual == 0;
  }
  __syncthreads();
  if (empty_residual)  // rounding left the residual empty (p == q): p's masses, here (rare)
    for (std::int32_t c = 0; c < chunks; ++c) {
      const std::uint64_t mass = chunk_mass(c, false);
      if (t == 0) target_mass[c] = mass;
    }
  __syncthreads();
  if (t == 0) {
    std::uint64_t residual = 0, target = 0;
    for (std::int32_t c = 0; c < chunks; ++c) residual += residual_mass[c], target += target_mass[c];
    // sample_residual: the residual, or p when rounding left it empty (and for the bonus).
    draw_residual = rejected && residual != 0;
    const std::uint64_t total = draw_residual ? residual : target;
    found_chunk = -1;
    if (total != 0) {
      const double u = detail::tree_uniforms(tree_streams, seed, b, offset)[static_cast<std::uint64_t>(gamma)];
      const std::uint64_t threshold = row_math::draw_threshold(u, total);
      std::uint64_t run = 0;
      for (std::int32_t c = 0; c < chunks; ++c) {
        const std::uint64_t m = draw_residual ? residual_mass[c] : target_mass[c];
        if (run + m > threshold) {
          found_chunk = c;
          local_threshold = threshold - run;
          break;
        }
        run += m;
      }
    }
  }
  __syncthreads();
  TokenId* emitted = out + row;
  if (found_chunk < 0) {
    if (t == 0) *emitted = kNoToken;  // the row has no mass (not a distribution)
    return;
  }
  // Thread t holds tokens 8t .. 8t + 7 of the chunk, so thread order is token order.
  const std::int64_t c0 = found_chunk * kChunk;
  const std::int64_t n = vocab - c0 < kChunk ? vocab - c0 : kChunk;
  const float chunk_max = stats[found_chunk].max;
  const float factor = chunk_factor(chunk_max);
  std::uint64_t w[8], mine = 0;
  for (int j = 0; j < 8; ++j) {
    const std::int64_t k = c0 + 8 * t + j;
    w[j] = 0;
    if (k < c0 + n) {
      const float p = p_of(k, chunk_max, factor);
      w[j] = bitexact::fixed_mass(draw_residual ? residual_of(k, p) : static_cast<double>(p));
    }
    mine += w[j];
  }
  std::uint64_t total = 0;
  std::uint64_t acc = detail::block_exclusive_scan_u64(mine, sh, &total);
  if (acc <= local_threshold && local_threshold < acc + mine) {  // exactly one thread
    for (int j = 0; j < 8; ++j) {
      acc += w[j];
      if (acc > local_threshold) {
        *emitted = static_cast<TokenId>(c0 + 8 * t + j);
        break;
      }
    }
  }
}

bool valid_from_logits_shape(std::int32_t batch, std::int32_t gamma, std::int64_t vocab) {
  return batch >= 0 && gamma >= 0 && gamma + 1 <= kMaxRows && vocab > 0 && vocab <= kMaxVocab &&
         std::int64_t{batch} * (gamma + 1) <= kMaxRequests;
}

}  // namespace

std::size_t chain_from_logits_workspace_bytes(std::int32_t batch, std::int32_t gamma, std::int64_t vocab) {
  if (!valid_from_logits_shape(batch, gamma, vocab)) return 0;
  return Workspace::bytes(batch, gamma + 1, (vocab + kChunk - 1) / kChunk);
}

Status chain_speculative_sampling_from_logits(const float* draft_probs, const TokenId* draft_tokens,
                                              const float* target_logits, const float* temperatures,
                                              TokenId* output_tokens, std::int32_t* num_accepted,
                                              std::int32_t batch, std::int32_t gamma, std::int64_t vocab,
                                              std::uint64_t seed, std::uint64_t offset, void* workspace,
                                              std::size_t workspace_bytes, void* stream,
    const PhiloxUniforms* tree_streams) {
  if (!detail::valid_chain_arguments(draft_tokens, target_logits, output_tokens, num_accepted, batch, gamma,
                                     vocab) ||
      !valid_from_logits_shape(batch, gamma, vocab))
    return Status::kInvalidArgument;
  if (batch == 0) return Status::kOk;
  if (temperatures == nullptr || workspace == nullptr || reinterpret_cast<std::uintptr_t>(workspace) % 16 != 0 ||
      workspace_bytes < chain_from_logits_workspace_bytes(batch, gamma, vocab))
    return Status::kInvalidArgument;
  const auto chunks = static_cast<std::int32_t>((vocab + kChunk - 1) / kChunk);
  const Workspace ws = Workspace::at(workspace, batch, gamma + 1, chunks);
  const auto s = static_cast<cudaStream_t>(stream);
  // Phase 1's blocks: detail::chunks_per_block chunks each.
  const std::int64_t rows = std::int64_t{batch} * (gamma + 1);
  const auto per_block = static_cast<std::int32_t>(detail::chunks_per_block(rows, chunks));
  const auto segments = static_cast<unsigned>((chunks + per_block - 1) / per_block);
  stats_and_tests_kernel<<<dim3(segments, static_cast<unsigned>(rows)), kBlock, 0, s>>>(
      target_logits, draft_probs, draft_tokens, temperatures, output_tokens, num_accepted, ws, gamma, vocab, chunks,
      per_block, seed, offset, tree_streams);
  if (cudaGetLastError() != cudaSuccess) return Status::kCudaError;
  draw_kernel<<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(batch)), kBlock, 0, s>>>(
      target_logits, draft_probs, draft_tokens, temperatures, output_tokens, ws, gamma, vocab, chunks, seed,
      offset, tree_streams);
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kCudaError;
}

}  // namespace specdec::cuda
