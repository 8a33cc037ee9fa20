#include "specdec/cpu/row_linear.hpp"

#include <fmt/format.h>

#include "row_gemm.hpp"
#include "specdec/core/error.hpp"
#include "thread_buffer.hpp"

namespace specdec::cpu {
namespace {

row_gemm::Format format_of(DType storage) {
  return storage == DType::kBF16 ? row_gemm::Format::kBf16 : row_gemm::Format::kF32;
}

// The calling thread's input rows in the kernel's format (f32, or bf16
// pairs): calls on different layers and threads run concurrently.
struct StagingTag;

}  // namespace

struct RowLinear::Impl {
  row_gemm::PackedWeights weights;
  DType storage;

  void* staging(std::int64_t m) const {
    const auto n = m * weights.in_padded();
    if (weights.format() == row_gemm::Format::kF32) return thread_buffer<StagingTag, float>(n);
    return thread_buffer<StagingTag, std::uint16_t>(n);
  }

  void rows(const float* x, std::int64_t m, float* y, bool add, const char* what) const {
    if (m <= 0) throw InvalidArgumentError(fmt::format("RowLinear::{}: m must be >= 1, got {}", what, m));
    if (x == nullptr || y == nullptr)
      throw InvalidArgumentError(fmt::format("RowLinear::{}: null input or output pointer", what));
    if (weights.format() == row_gemm::Format::kF32) {
      weights.multiply(x, m, y, add);
      return;
    }
    auto* staged = static_cast<std::uint16_t*>(staging(m));
    row_gemm::round_rows(x, m, weights.in(), weights.in_padded(), staged);
    weights.multiply(staged, m, y, add);
  }

  void source(RowSource rows, std::int64_t m, float* y, bool add, const char* what) const {
    if (m <= 0) throw InvalidArgumentError(fmt::format("RowLinear::{}: m must be >= 1, got {}", what, m));
    if (rows.fill == nullptr || y == nullptr)
      throw InvalidArgumentError(fmt::format("RowLinear::{}: null row source or output pointer", what));
    weights.multiply_rows(rows.fill, rows.context, m, staging(m), y, add);
  }
};

bool RowLinear::available(DType storage) {
  return (storage == DType::kF32 || storage == DType::kBF16) && row_gemm::available(format_of(storage));
}

const char* RowLinear::isa_name(DType storage) {
  return storage == DType::kF32 || storage == DType::kBF16 ? row_gemm::isa_name(format_of(storage)) : "";
}

RowLinear::RowLinear(const float* weight, std::int64_t out, std::int64_t in, DType storage) {
  if (storage != DType::kF32 && storage != DType::kBF16)
    throw InvalidArgumentError(
        fmt::format("RowLinear: weights are stored as f32 or bf16, not {}", dtype_name(storage)));
  if (out <= 0 || in <= 0) throw ShapeError(fmt::format("RowLinear: the weight [{}, {}] is empty", out, in));
  if (weight == nullptr) throw InvalidArgumentError("RowLinear: null weight");
  if (!available(storage))
    throw UnsupportedError(fmt::format("RowLinear: this CPU has no {} row kernel ({})", dtype_name(storage),
                                       storage == DType::kF32
                                           ? "it needs AVX-512F, or AVX2 and FMA"
                                           : "it needs AVX-512 with AVX512_BF16; use f32"));
  impl_ = std::make_unique<Impl>(Impl{row_gemm::PackedWeights(weight, out, in, format_of(storage)), storage});
}

RowLinear::~RowLinear() = default;
RowLinear::RowLinear(RowLinear&&) noexcept = default;
RowLinear& RowLinear::operator=(RowLinear&&) noexcept = default;

std::int64_t RowLinear::in_features() const {
  return impl_ ? impl_->weights.in() : 0;
}
std::int64_t RowLinear::out_features() const {
  return impl_ ? impl_->weights.out() : 0;
}
DType RowLinear::storage() const {
  return impl_ ? impl_->storage : DType::kF32;
}

void RowLinear::forward(const float* x, std::int64_t m, float* y) const {
  impl_->rows(x, m, y, false, "forward");
}
void RowLinear::forward_add(const float* x, std::int64_t m, float* y) const {
  impl_->rows(x, m, y, true, "forward_add");
}
void RowLinear::forward(RowSource rows, std::int64_t m, float* y) const {
  impl_->source(rows, m, y, false, "forward");
}
void RowLinear::forward_add(RowSource rows, std::int64_t m, float* y) const {
  impl_->source(rows, m, y, true, "forward_add");
}

}  // namespace specdec::cpu
