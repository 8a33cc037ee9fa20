// PackedLinear on specdec's row kernel (cpu::RowLinear over src/cpu/row_gemm.hpp:
// f32 on AVX-512F or AVX2 with FMA, bf16 on AVX512_BF16), and on oneDNN's
// matmul primitive elsewhere. Why the row kernel comes first: row_gemm.hpp. The oneDNN notes
// below hold for the oneDNN path.
//
// Design (measured on this repository's 2-core AVX-512 machine, oneDNN 2.6.3,
// 56 matrices 1408x512 / 512x1408 f32, 2 OpenMP threads, ms per pass over all
// 56, best of 30; two runs of a throwaway probe with both variants interleaved
// in the same process; bench/linear_bench.cpp has the maintained numbers):
//
//   m                        1     2     4     8    16    32    64   128
//   fixed-M primitive      2.11  2.38  2.47  3.04  4.11  7.00 12.11 23.47
//   runtime-M primitive    2.75  2.92  3.77  3.33  4.30  6.74 11.22 23.14
//   fixed-M (run 2)        2.71  3.05  3.22  3.96  5.14  8.37 13.93 25.61
//   runtime-M (run 2)      3.65  3.79  4.76  4.44  5.52  8.14 13.40 25.52
//
// (a) One primitive with a runtime M (DNNL_RUNTIME_DIM_VAL) is accepted, but
//     oneDNN 2.6 then answers format_tag::any on the weights with the plain
//     layout and dispatches to "gemm:jit", which cannot use weights packed
//     ahead of time: 5-50% slower for m <= 16, the sizes a decoder runs, and
//     at most 7% faster at m = 32..128.
// (b) Primitives with a fixed M dispatch to "brg:avx512_core" and ask for a
//     blocked weight layout that depends on K and N only: the layout queried
//     for m = 1 is identical for every m in 1..128. So one packed copy of the
//     weights serves all of them, and we keep a primitive per exact m (up to
//     kMaxRows), created lazily on the first call with that m. Creation costs
//     ~50 us the first time oneDNN sees a shape and ~3 us after that (its
//     global primitive cache is shared by all layers of equal shape), so exact
//     m beats padding m up to power-of-two buckets, which would compute the
//     padding rows on every call. Larger m run in kMaxRows-row chunks; there
//     the work is compute-bound and re-reading the weights per chunk is noise.
//     Every m's primitive is created with the packed layout given explicitly;
//     were some m's preferred layout ever different, oneDNN would still pick an
//     implementation that reads this one (correct, possibly slower), and
//     implementation(m) reports which.
//
// Inner product (brgemm) was 5-10% slower than matmul for m in 1..64, and the
// OpenBLAS path at::linear / at::matmul 3-5x slower (it re-packs the weights).
//
// bf16 weights (issue 15). A call rounds its source rows to bf16 into a
// per-thread staging buffer (m x in values, negligible next to the weights)
// and accumulates in f32. On CPUs with AVX512_BF16 the product runs on
// row_gemm.hpp's kernel, which streams the weights once for a few rows
// (oneDNN 2.6's bf16 brgemm pays more per extra row; see row_gemm.hpp);
// elsewhere on oneDNN, which has bf16 x bf16 -> f32 matmuls only (no f32 x
// bf16, and no f16 at all without AVX512_FP16).
//
// No allocation per call: each m's entry keeps its source, destination and
// scratchpad memory objects (user scratchpad mode, one buffer per object sized
// for the largest entry) and only their data handles change.
#include "specdec/torch/packed_linear.hpp"

#include <ATen/Parallel.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/cpu/row_linear.hpp"
#include "specdec/io/float_convert.hpp"
#include "thread_buffer.hpp"

namespace specdec::torch_backend {
using cpu::thread_buffer;
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using DataType = memory::data_type;

// Rows per primitive; a forward over more rows runs in chunks of this many.
constexpr std::int64_t kMaxRows = 256;

// One CPU engine and stream for the process. A CPU stream executes primitives
// synchronously on the calling thread (OpenMP runtime), so sharing it is fine.
dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& cpu_stream() {
  static dnnl::stream stream(cpu_engine());
  return stream;
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

memory::desc rows_md(std::int64_t rows, std::int64_t cols, DataType type = DataType::f32) {
  return memory::desc({rows, cols}, type, Tag::ab);
}

DataType data_type_of(DType storage) { return storage == DType::kBF16 ? DataType::bf16 : DataType::f32; }

// Input rows of a call (bf16 copies on the oneDNN bf16 path; the row
// kernel's made rows); per thread because calls on different objects may run
// concurrently.
struct StagingTag;
std::uint16_t* bf16_staging(std::size_t n) {
  return thread_buffer<StagingTag, std::uint16_t>(static_cast<std::int64_t>(n));
}
struct FilledTag;  // rows of a RowSource on the oneDNN path

void round_to_bf16(const float* x, std::size_t n, std::uint16_t* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = io::f32_to_bf16(x[i]);
}

}  // namespace

struct PackedLinear::Impl {
  // Everything one m needs to execute; built once, reused with new pointers.
  struct Entry {
    dnnl::matmul primitive;
    memory src, dst, scratchpad;
    bool has_scratchpad = false;
    std::string implementation;
  };

  std::int64_t in = 0;
  std::int64_t out = 0;
  DType storage = DType::kF32;
  std::optional<cpu::RowLinear> row_kernel;  // set: specdec's row kernel computes every call
  memory::desc weights_md;  // the packed layout shared by every m
  memory weights;           // packed weights (owned by oneDNN)
  // [add][threads - 1][m - 1]: oneDNN fixes a primitive's thread count when
  // it is created (brgemm matmul partitions its work for the calling thread's
  // OpenMP thread count then, at::get_num_threads(), and runs that many
  // threads whatever the caller's setting later is). A model called with
  // different thread counts (DuoDecoding's target on one core, other methods
  // on two) keeps a primitive per count. add = 0 computes y = x W^T, add = 1
  // y += x W^T (a sum post-op).
  std::array<std::vector<std::vector<std::optional<Entry>>>, 2> entries;
  memory scratchpad_buffer;  // shared by all entries, sized for the largest
  std::size_t scratchpad_bytes = 0;
  std::mutex mutex;  // serializes forward (entries and handles are shared state)

  Entry make_entry(const dnnl::matmul::primitive_desc& pd, std::int64_t m) {
    dnnl::engine& engine = cpu_engine();
    Entry e;
    e.primitive = dnnl::matmul(pd);
    e.src = memory(rows_md(m, in, data_type_of(storage)), engine, DNNL_MEMORY_NONE);
    e.dst = memory(rows_md(m, out), engine, DNNL_MEMORY_NONE);
    const memory::desc scratch_md = pd.scratchpad_desc();
    const std::size_t bytes = scratch_md.get_size();
    if (bytes > 0) {
      e.has_scratchpad = true;
      e.scratchpad = memory(scratch_md, engine, DNNL_MEMORY_NONE);
      if (bytes > scratchpad_bytes) {
        const auto n = static_cast<memory::dim>(bytes);
        scratchpad_buffer = memory(memory::desc({n}, DataType::u8, Tag::a), engine);
        scratchpad_bytes = bytes;
      }
    }
    e.implementation = pd.impl_info_str();
    return e;
  }

  Entry& entry(std::int64_t m, bool add) {
    const auto threads = static_cast<std::size_t>(std::max(1, at::get_num_threads()));
    auto& by_threads = entries[add ? 1 : 0];
    if (by_threads.size() < threads) by_threads.resize(threads);
    auto& by_m = by_threads[threads - 1];
    if (by_m.empty()) by_m.resize(static_cast<std::size_t>(kMaxRows));
    std::optional<Entry>& slot = by_m[static_cast<std::size_t>(m - 1)];
    if (!slot) {
      dnnl::primitive_attr attr = user_scratchpad_attr();
      if (add) {
        dnnl::post_ops sum;
        sum.append_sum(1.0f);
        attr.set_post_ops(sum);
      }
      dnnl::matmul::primitive_desc pd(
          dnnl::matmul::desc(rows_md(m, in, data_type_of(storage)), weights_md, rows_md(m, out)), attr,
          cpu_engine());
      slot = make_entry(pd, m);
    }
    return *slot;
  }

  // m in [1, kMaxRows].
  void run(const float* x, std::int64_t m, float* y, bool add) {
    Entry& e = entry(m, add);
    if (storage == DType::kBF16) {
      const auto n = static_cast<std::size_t>(m * in);
      std::uint16_t* staged = bf16_staging(n);
      round_to_bf16(x, n, staged);
      e.src.set_data_handle(staged);
    } else {
      // oneDNN takes void*; the source is only read.
      e.src.set_data_handle(const_cast<float*>(x));
    }
    e.dst.set_data_handle(y);
    std::array<dnnl_exec_arg_t, 4> args{{{DNNL_ARG_SRC, e.src.get()},
                                         {DNNL_ARG_WEIGHTS, weights.get()},
                                         {DNNL_ARG_DST, e.dst.get()},
                                         {DNNL_ARG_SCRATCHPAD, nullptr}}};
    int nargs = 3;
    if (e.has_scratchpad) {
      e.scratchpad.set_data_handle(scratchpad_buffer.get_data_handle());
      args[3].memory = e.scratchpad.get();
      nargs = 4;
    }
    // The C entry point with a fixed argument array: the C++ execute() builds
    // a std::vector from an unordered_map on every call.
    dnnl::error::wrap_c_api(dnnl_primitive_execute(e.primitive.get(), cpu_stream().get(), nargs, args.data()),
                            "PackedLinear: could not execute the matmul primitive");
  }

  void run_source(RowSource rows, std::int64_t m, float* y, bool add, const char* what) {
    if (m <= 0) throw InvalidArgumentError(fmt::format("PackedLinear::{}: m must be >= 1, got {}", what, m));
    if (rows.fill == nullptr || y == nullptr)
      throw InvalidArgumentError(fmt::format("PackedLinear::{}: null row source or output pointer", what));
    if (row_kernel) {
      if (add)
        row_kernel->forward_add(rows, m, y);
      else
        row_kernel->forward(rows, m, y);
      return;
    }
    float* filled = thread_buffer<FilledTag>(m * in);
    for (std::int64_t r = 0; r < m; ++r) rows.fill(rows.context, r, filled + r * in);
    run_rows(filled, m, y, add, what);
  }

  void run_rows(const float* x, std::int64_t m, float* y, bool add, const char* what) {
    if (m <= 0) throw InvalidArgumentError(fmt::format("PackedLinear::{}: m must be >= 1, got {}", what, m));
    if (x == nullptr || y == nullptr)
      throw InvalidArgumentError(fmt::format("PackedLinear::{}: null input or output pointer", what));
    if (row_kernel) {
      if (add)
        row_kernel->forward_add(x, m, y);
      else
        row_kernel->forward(x, m, y);
      return;
    }
    const std::lock_guard<std::mutex> lock(mutex);
    try {
      for (std::int64_t row = 0; row < m; row += kMaxRows) {
        const std::int64_t rows = std::min(kMaxRows, m - row);
        run(x + row * in, rows, y + row * out, add);
      }
    } catch (const dnnl::error& e) {
      throw Error(fmt::format("PackedLinear::{} ({} rows): {}", what, m, e.what()));
    }
  }
};

PackedLinear::PackedLinear(const at::Tensor& weight, DType storage, Kernel kernel) {
  if (weight.dim() != 2)
    throw ShapeError(fmt::format("PackedLinear: the weight must be 2-d [out, in], got {} dimensions", weight.dim()));
  if (weight.scalar_type() != at::kFloat)
    throw InvalidArgumentError(
        fmt::format("PackedLinear: the weight must be float32, got {}", c10::toString(weight.scalar_type())));
  if (weight.size(0) == 0 || weight.size(1) == 0)
    throw ShapeError(fmt::format("PackedLinear: the weight [{}, {}] is empty", weight.size(0), weight.size(1)));
  if (storage != DType::kF32 && storage != DType::kBF16)
    throw InvalidArgumentError(fmt::format("PackedLinear: weights are stored as f32 or bf16, not {}{}",
                                           dtype_name(storage),
                                           storage == DType::kF16 ? " (oneDNN 2.6 has no f16 matmul on CPUs "
                                                                    "without AVX512_FP16)"
                                                                  : ""));

  auto impl = std::make_unique<Impl>();
  impl->out = weight.size(0);
  impl->in = weight.size(1);
  impl->storage = storage;
  if (kernel == Kernel::kAuto && cpu::RowLinear::available(storage)) {
    const at::Tensor w = weight.detach().to(at::kCPU).contiguous();
    impl->row_kernel.emplace(w.data_ptr<float>(), impl->out, impl->in, storage);
    impl_ = std::move(impl);
    return;
  }
  const auto type = data_type_of(storage);
  // Rounded to bf16 by libtorch (nearest, ties to even) before packing.
  const at::Tensor w =
      weight.detach().to(at::kCPU).to(storage == DType::kBF16 ? at::kBFloat16 : at::kFloat).contiguous();
  try {
    dnnl::engine& engine = cpu_engine();
    dnnl::stream& stream = cpu_stream();
    // Let the m = 1 primitive (decoding, the hot path) choose the layout; the
    // primitives themselves are made on first use, per thread count (entry()).
    const memory::desc any_weights({impl->in, impl->out}, type, Tag::any);
    dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(rows_md(1, impl->in, type), any_weights, rows_md(1, impl->out)), user_scratchpad_attr(),
        engine);
    impl->weights_md = pd.weights_desc();
    impl->weights = memory(impl->weights_md, engine);
    // W [out, in] row-major is W^T [in, out] with strides {1, in}: tag ba.
    memory user(memory::desc({impl->in, impl->out}, type, Tag::ba), engine, w.data_ptr());
    dnnl::reorder(user, impl->weights).execute(stream, user, impl->weights);
    stream.wait();
  } catch (const dnnl::error& e) {
    throw UnsupportedError(fmt::format("PackedLinear: oneDNN cannot set up a [{}, {}] {} matmul: {}", impl->out,
                                       impl->in, dtype_name(storage), e.what()));
  }
  impl_ = std::move(impl);
}

PackedLinear::~PackedLinear() = default;
PackedLinear::PackedLinear(PackedLinear&&) noexcept = default;
PackedLinear& PackedLinear::operator=(PackedLinear&&) noexcept = default;

std::int64_t PackedLinear::in_features() const { return impl_ ? impl_->in : 0; }
std::int64_t PackedLinear::out_features() const { return impl_ ? impl_->out : 0; }
DType PackedLinear::storage() const { return impl_ ? impl_->storage : DType::kF32; }

void PackedLinear::forward(const float* x, std::int64_t m, float* y) const {
  if (!impl_) throw InvalidArgumentError("PackedLinear::forward: the object was moved from");
  impl_->run_rows(x, m, y, /*add=*/false, "forward");
}

void PackedLinear::forward_add(const float* x, std::int64_t m, float* y) const {
  if (!impl_) throw InvalidArgumentError("PackedLinear::forward_add: the object was moved from");
  impl_->run_rows(x, m, y, /*add=*/true, "forward_add");
}

void PackedLinear::forward(RowSource rows, std::int64_t m, float* y) const {
  if (!impl_) throw InvalidArgumentError("PackedLinear::forward: the object was moved from");
  impl_->run_source(rows, m, y, /*add=*/false, "forward");
}

void PackedLinear::forward_add(RowSource rows, std::int64_t m, float* y) const {
  if (!impl_) throw InvalidArgumentError("PackedLinear::forward_add: the object was moved from");
  impl_->run_source(rows, m, y, /*add=*/true, "forward_add");
}

at::Tensor PackedLinear::operator()(const at::Tensor& x) const {
  if (!impl_) throw InvalidArgumentError("PackedLinear: the object was moved from");
  if (x.dim() != 2) throw ShapeError(fmt::format("PackedLinear: x must be 2-d [m, in], got {} dimensions", x.dim()));
  if (x.size(1) != impl_->in)
    throw ShapeError(fmt::format("PackedLinear: x has inner dimension {}, the weight expects {}", x.size(1), impl_->in));
  if (x.scalar_type() != at::kFloat)
    throw InvalidArgumentError(fmt::format("PackedLinear: x must be float32, got {}", c10::toString(x.scalar_type())));
  if (!x.is_cpu()) throw UnsupportedError(fmt::format("PackedLinear: x is on {}, expected the CPU", x.device().str()));
  if (x.size(0) <= 0) throw InvalidArgumentError("PackedLinear: x has no rows");
  const at::Tensor xc = x.contiguous();
  at::Tensor y = at::empty({x.size(0), impl_->out}, x.options());
  forward(xc.data_ptr<float>(), x.size(0), y.data_ptr<float>());
  return y;
}

std::string PackedLinear::implementation(std::int64_t m) const {
  if (!impl_) throw InvalidArgumentError("PackedLinear: the object was moved from");
  if (m <= 0) throw InvalidArgumentError(fmt::format("PackedLinear::implementation: m must be >= 1, got {}", m));
  if (impl_->row_kernel) return std::string("specdec:") + cpu::RowLinear::isa_name(impl_->storage);
  const std::lock_guard<std::mutex> lock(impl_->mutex);
  try {
    return impl_->entry(std::min(m, kMaxRows), /*add=*/false).implementation;
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("PackedLinear::implementation ({} rows): {}", m, e.what()));
  }
}

bool PackedLinear::native_bf16() {
  static const bool native = [] {
    if (cpu::RowLinear::available(DType::kBF16)) return true;
    try {
      const memory::desc src({1, 64}, DataType::bf16, Tag::ab), dst({1, 64}, DataType::f32, Tag::ab);
      const memory::desc weights({64, 64}, DataType::bf16, Tag::any);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, dst), cpu_engine());
      const std::string impl = pd.impl_info_str();
      return impl.find("ref") == std::string::npos &&
             (impl.find("bf16") != std::string::npos || impl.find("amx") != std::string::npos);
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return native;
}

}  // namespace specdec::torch_backend
