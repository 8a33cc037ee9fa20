#include "row_gemm.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "row_gemm_kernels.hpp"
#include "specdec/cpu/threads.hpp"
#include "specdec/io/float_convert.hpp"
#include "thread_buffer.hpp"
#include "thread_team.hpp"

namespace specdec::cpu::row_gemm {
namespace {

constexpr std::int64_t kCols = 64;  // output columns per block (row_gemm_tile.hpp)

}  // namespace

namespace {

#if defined(__x86_64__)
bool has_avx512_f32() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}
bool has_avx2_f32() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
bool has_bf16() {
  static const bool yes = has_avx512_f32() && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return yes;
}
#else  // the kernels are x86-64 code (row_gemm_*.cpp): none elsewhere
bool has_avx512_f32() {
  return false;
}
bool has_avx2_f32() {
  return false;
}
bool has_bf16() {
  return false;
}
#endif

}  // namespace

#if !defined(__x86_64__)
// Never called: available() is false, and PackedWeights is built only where
// it is true.
void run_block_f32(const std::uint32_t*, std::int64_t, const unsigned char*, std::int64_t, std::int64_t,
                   float*, std::int64_t, std::int64_t, bool) {
  std::abort();
}
void run_block_f32_avx2(const std::uint32_t*, std::int64_t, const unsigned char*, std::int64_t, std::int64_t,
                        float*, std::int64_t, std::int64_t, bool) {
  std::abort();
}
void run_block_bf16(const std::uint32_t*, std::int64_t, const unsigned char*, std::int64_t, std::int64_t,
                    float*, std::int64_t, std::int64_t, bool) {
  std::abort();
}
void round_rows_bf16(const float*, std::int64_t, std::int64_t, std::int64_t, std::uint16_t*) {
  std::abort();
}
#endif

bool available(Format format) {
  return format == Format::kF32 ? has_avx512_f32() || has_avx2_f32() : has_bf16();
}

const char* isa_name(Format format) {
  if (format == Format::kBf16) return has_bf16() ? "avx512_bf16" : "";
  return has_avx512_f32() ? "avx512_f32" : has_avx2_f32() ? "avx2_f32" : "";
}

void round_rows(const float* x, std::int64_t m, std::int64_t in, std::int64_t stride, std::uint16_t* out) {
  round_rows_bf16(x, m, in, stride, out);
}

void PackedWeights::Free::operator()(std::uint32_t* p) const {
  std::free(p);
}

PackedWeights::PackedWeights(const float* weight, std::int64_t out, std::int64_t in, Format format)
    : format_(format),
      in_(in),
      out_(out),
      steps_(format == Format::kF32 ? in : (in + 1) / 2),
      blocks_((out + kCols - 1) / kCols) {
  const auto n = static_cast<std::size_t>(blocks_ * steps_ * kCols);
  const std::size_t bytes = (n * sizeof(std::uint32_t) + 63) / 64 * 64;
  data_.reset(static_cast<std::uint32_t*>(std::aligned_alloc(64, bytes)));
  if (!data_) throw std::bad_alloc();
  std::uint32_t* d = data_.get();
  // [block][step][column]; padding columns (and bf16's odd k tail) are zero.
  const auto at = [&](std::int64_t col, std::int64_t k) {
    return col < out && k < in ? weight[col * in + k] : 0.0f;
  };
  for (std::int64_t b = 0; b < blocks_; ++b)
    for (std::int64_t s = 0; s < steps_; ++s)
      for (std::int64_t c = 0; c < kCols; ++c) {
        const std::int64_t col = b * kCols + c;
        if (format == Format::kF32) {
          const float v = at(col, s);
          std::memcpy(d++, &v, sizeof v);
        } else {  // the pair (k = 2s, 2s + 1), low half first, as VDPBF16PS reads it
          *d++ = std::uint32_t{io::f32_to_bf16(at(col, 2 * s))} |
                 (std::uint32_t{io::f32_to_bf16(at(col, 2 * s + 1))} << 16);
        }
      }
}

void PackedWeights::multiply(const void* x, std::int64_t m, float* y, bool add) const {
  const std::uint32_t* w = data_.get();
  const auto block_size = steps_ * kCols;
  const auto* xb = static_cast<const unsigned char*>(x);
  const auto run_block = format_ == Format::kBf16 ? run_block_bf16
                         : has_avx512_f32()       ? run_block_f32
                                                  : run_block_f32_avx2;
  parallel_for(blocks_, [&](std::int64_t b) {
    run_block(w + b * block_size, steps_, xb, steps_, m, y + b * kCols, out_,
              std::min(kCols, out_ - b * kCols), add);
  });
}

namespace {
struct FillRowTag;  // a thread's f32 row for fill (the team's threads each have their own)
}  // namespace

void PackedWeights::multiply_rows(void (*fill)(const void*, std::int64_t, float*), const void* context,
                                  std::int64_t m, void* staged, float* y, bool add) const {
  const auto stride = in_padded();
  const auto fill_one = [&](std::int64_t r) {
    if (format_ == Format::kF32) {
      fill(context, r, static_cast<float*>(staged) + r * stride);
      return;
    }
    float* row = thread_buffer<FillRowTag>(in_);
    fill(context, r, row);
    round_rows(row, 1, in_, stride, static_cast<std::uint16_t*>(staged) + r * stride);
  };
  // Few rows: the calling thread fills them (a team step costs more).
  if (m < kFillInTeam || forward_threads() == 1)
    for (std::int64_t r = 0; r < m; ++r) fill_one(r);
  else
    parallel_for(m, fill_one);
  multiply(staged, m, y, add);
}

}  // namespace specdec::cpu::row_gemm
