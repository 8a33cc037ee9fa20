// A Llama-architecture model on a CUDA device (docs/cuda.md, "The CUDA
// model"): the Model concept of the host models, with its weights, caches
// and activations in device memory. The same config.json and safetensors as
// torch_backend::LlamaModel (Hugging Face names), the same semantics:
// per-sequence KV caches (dense, or sink + window), new tokens with
// caller-chosen positions and an ancestor mask among them, staged keys and values that accept(path) compacts
// and rollback drops, ragged batches of sequences in one forward.
//
// The forward: token embeddings; per layer RMSNorm, the fused q/k/v
// projection, RoPE (rotate-half, rope_theta) with the keys and values written
// into the caches, attention over the committed prefix and the visible
// staged tokens (multi-head or grouped-query), the output projection added to
// the residual, RMSNorm, the fused gate/up projection, SwiGLU and the down
// projection added to the residual; the final RMSNorm and the LM head (tied or
// untied). Weights are kept in f32 or bf16; activations, keys, values and
// every accumulation are f32. The projections of a row do not depend on how
// many rows the forward has (each output is one warp's sum in a fixed
// order), so a verification's rows equal the autoregressive steps' bit for
// bit, as greedy speculation needs (docs/acceptance.md).
//
// Outputs go where the request's views point: a device view
// (Device{kCUDA, index}) is written in place and forward() returns without
// waiting for the device; a host view is copied back before forward()
// returns. Work is enqueued on stream() in order, so a DeviceVerifier or
// DeviceRound given the same stream reads the logits after they are written.
// Forwards are serialised (one scratch and one stream per model).
//
// No CUDA headers needed (link specdec::cuda); throws DeviceError when the
// CUDA runtime fails.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>

#include "specdec/core/round.hpp"
#include "specdec/core/types.hpp"
#include "specdec/io/llama_config.hpp"

namespace specdec::cuda {

class LlamaModel {
 public:
  // config.json + model.safetensors (or a sharded index) from `dir`, weights
  // kept on device `device` in `weights` precision (kF32 or kBF16; the
  // checkpoint's f16/bf16/f32 are converted). Throws ModelLoadError as the
  // host model does (a missing or misshapen tensor, one of another
  // architecture), InvalidArgumentError for another precision.
  static LlamaModel load(const std::filesystem::path& dir, DType weights = DType::kBF16, int device = 0);
  // Random weights drawn on the device, as torch_backend::LlamaModel::random
  // draws them (N(0, 0.02), the residual outputs scaled by 1/sqrt(2 *
  // layers), unit norms) but from Philox streams of `seed`: for timing models
  // of real shapes without their checkpoints.
  static LlamaModel random(const io::LlamaConfig& config, std::uint64_t seed, DType weights = DType::kBF16,
                           int device = 0);
  ~LlamaModel();
  LlamaModel(LlamaModel&&) noexcept;
  LlamaModel& operator=(LlamaModel&&) noexcept;
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;

  const io::LlamaConfig& config() const;
  std::int64_t vocab_size() const { return config().vocab_size; }
  std::int64_t hidden_size() const { return config().hidden_size; }
  std::int64_t max_context() const { return config().max_position_embeddings; }
  std::int64_t num_parameters() const;
  DType weight_dtype() const;
  Device device() const;
  // The cudaStream_t every forward, accept and copy runs on (the model's
  // own, created at load).
  void* stream() const;
  // Waits until the work enqueued on stream() is done. A forward without host
  // outputs (a prefill) returns before the device finishes it.
  void synchronize() const;
  // Device bytes of the weights (what a decode step reads at least once).
  std::int64_t weight_bytes() const;
  // Whether forwards run as CUDA graphs: a forward of a shape (row count,
  // outputs) met twice is captured, and replayed whenever it comes again.
  // Off by default (SPECDEC_CUDA_GRAPHS=1 in the environment turns it on at
  // load): while a forward is captured, no other thread may use the legacy
  // default stream, which would wait for this model's stream.
  void set_graphs(bool on);

  // ---- Model concept -------------------------------------------------------
  // Opens (or reopens, emptied) sequence `seq` with a dense cache of
  // max_context() tokens, or a sink + window cache (CachePolicy::sink_window:
  // StreamingLLM's attention sink and sliding window, with positions in the
  // text or within the cache) of sink + window + 64 rows, grown for a
  // forward that stages more and shrunk back at its accept. Throws
  // InvalidArgumentError for sink < 0 or window < 1.
  void open(std::int32_t seq, const CachePolicy& policy = {});
  void close(std::int32_t seq);
  std::int64_t cached_length(std::int32_t seq) const;
  // Rows per layer and kv head that sequence `seq`'s cache holds now (its
  // device memory: rows x layers x kv heads x head_dim x 8 bytes).
  std::int64_t cache_rows(std::int32_t seq) const;
  void forward(const ForwardRequest& request);
  void accept(std::int32_t seq, std::span<const std::int32_t> path);
  void rollback(std::int32_t seq, std::int64_t length);

 private:
  struct Impl;
  explicit LlamaModel(std::unique_ptr<Impl> impl);
  // A model of `config` with its stream, weight memory and RoPE tables.
  static std::unique_ptr<Impl> start(const io::LlamaConfig& config, DType weights, int device);
  std::unique_ptr<Impl> impl_;
};

}  // namespace specdec::cuda
