// A linear layer y = x W^T as the CPU forwards use it: a decoder layer's four
// products and a model's LM head (src/cpu/decoder_layer.hpp, cpu::LlamaModel).
// Implementations keep their weights packed for the few-row products of
// decoding: cpu::RowLinear (specdec's row kernel, no dependencies) and
// torch_backend::PackedLinear (the row kernel where the CPU has it, oneDNN
// elsewhere).
#pragma once

#include <cstdint>

namespace specdec::cpu {

class Linear {
 public:
  virtual ~Linear() = default;

  virtual std::int64_t in_features() const = 0;
  virtual std::int64_t out_features() const = 0;

  // y[m, out] = x[m, in] W^T, both row-major and dense; x and y must not
  // overlap. Throws InvalidArgumentError for m <= 0 or a null pointer.
  // Safe to call from several threads at once.
  virtual void forward(const float* x, std::int64_t m, float* y) const = 0;
  // y[m, out] += x[m, in] W^T: the residual connection fused into the
  // product, which saves a pass over y.
  virtual void forward_add(const float* x, std::int64_t m, float* y) const = 0;

  // Input rows made on the fly: fill(context, r, row) writes row r's
  // in_features() values (a norm or an activation of the caller's data).
  // Where the rows are many (a verification) an implementation may fill them
  // on the product's threads, a row an item, so fill must be safe to call
  // concurrently for different rows.
  struct RowSource {
    void (*fill)(const void* context, std::int64_t row, float* out) = nullptr;
    const void* context = nullptr;
  };
  virtual void forward(RowSource rows, std::int64_t m, float* y) const = 0;
  virtual void forward_add(RowSource rows, std::int64_t m, float* y) const = 0;

 protected:
  Linear() = default;
  Linear(const Linear&) = default;
  Linear& operator=(const Linear&) = default;
};

}  // namespace specdec::cpu
