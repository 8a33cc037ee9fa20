#include "specdec/torch/packed_linear.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/torch/inference_dtype.hpp"
#include "support/catch.hpp"

namespace sd = specdec;
namespace tb = specdec::torch_backend;

namespace {

// y agrees with the libtorch reference x W^T to 1e-5 relative: in norm, and
// per element relative to sum_k |x_ik| |W_jk| (the scale of each dot product,
// which stays meaningful where the result itself cancels to near zero).
void check_close(const at::Tensor& y, const at::Tensor& x, const at::Tensor& w) {
  const at::Tensor ref = at::matmul(x, w.t());
  REQUIRE(y.sizes() == ref.sizes());
  const at::Tensor diff = (y - ref).abs();
  const double rel = (diff.norm() / ref.norm()).item<double>();
  CHECK(rel <= 1e-5);
  const at::Tensor scale = at::matmul(x.abs(), w.abs().t());
  const double worst = (diff / scale.clamp_min(1e-30)).max().item<double>();
  CHECK(worst <= 1e-5);
}

}  // namespace

TEST_CASE("PackedLinear matches at::matmul(x, W^T) for every row count", "[torch][linear]") {
  at::manual_seed(7);
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {{1408, 512}, {512, 1408}, {97, 32}, {8000, 512}};
  const std::vector<std::int64_t> rows = {1, 2, 3, 4, 7, 8, 16, 33, 64, 128};
  using K = tb::PackedLinear::Kernel;
  for (const auto kernel : {K::kAuto, K::kOneDnn})
  for (const auto& [out, in] : shapes) {
    const at::Tensor w = at::randn({out, in}) / std::sqrt(static_cast<double>(in));
    const tb::PackedLinear linear(w, sd::DType::kF32, kernel);
    INFO(linear.implementation(1));
    if (kernel == K::kOneDnn) CHECK(linear.implementation(1).rfind("specdec:", 0) != 0);
    CHECK(linear.out_features() == out);
    CHECK(linear.in_features() == in);
    for (const std::int64_t m : rows) {
      INFO("W [" << out << ", " << in << "], m = " << m);
      const at::Tensor x = at::randn({m, in});
      check_close(linear(x), x, w);
      // The pointer interface writes into caller memory.
      at::Tensor y = at::full({m, out}, -7.0f);
      linear.forward(x.data_ptr<float>(), m, y.data_ptr<float>());
      check_close(y, x, w);
    }
  }
}

TEST_CASE("PackedLinear repeats a row count with new buffers and mixes row counts", "[torch][linear]") {
  at::manual_seed(8);
  const at::Tensor w = at::randn({1408, 512}) / 16.0;
  const tb::PackedLinear linear(w);
  for (const std::int64_t m : {4, 1, 4, 16, 1, 4}) {
    INFO("m = " << m);
    const at::Tensor x = at::randn({m, 512});
    check_close(linear(x), x, w);
  }
}

TEST_CASE("PackedLinear runs more rows than one primitive takes in chunks", "[torch][linear]") {
  at::manual_seed(9);
  const at::Tensor w = at::randn({97, 32});
  const tb::PackedLinear linear(w);
  for (const std::int64_t m : {255, 256, 257, 600}) {
    INFO("m = " << m);
    const at::Tensor x = at::randn({m, 32});
    check_close(linear(x), x, w);
  }
}

TEST_CASE("PackedLinear copies the weight and accepts strided weights and inputs", "[torch][linear]") {
  at::manual_seed(10);
  // A transposed (non-contiguous) weight view.
  const at::Tensor wt = at::randn({512, 97});
  const at::Tensor w = wt.t();
  REQUIRE_FALSE(w.is_contiguous());
  at::Tensor owned = w.clone();
  const tb::PackedLinear linear(owned);
  const at::Tensor expected_w = owned.clone();
  owned.zero_();  // the object holds its own packed copy
  const at::Tensor x = at::randn({512, 5}).t();  // [5, 512], non-contiguous
  REQUIRE_FALSE(x.is_contiguous());
  check_close(linear(x), x.contiguous(), expected_w);
  const tb::PackedLinear from_view(w);
  check_close(from_view(x), x.contiguous(), w.contiguous());
}

TEST_CASE("PackedLinear survives a move and names a real implementation", "[torch][linear]") {
  at::manual_seed(11);
  const at::Tensor w = at::randn({512, 1408}) / 32.0;
  tb::PackedLinear a(w);
  tb::PackedLinear b(std::move(a));
  const at::Tensor x = at::randn({3, 1408});
  check_close(b(x), x, w);
  for (const std::int64_t m : {1, 2, 16, 128}) {
    const std::string impl = b.implementation(m);
    INFO("m = " << m << ": " << impl);
    CHECK_FALSE(impl.empty());
    CHECK(impl.rfind("ref", 0) != 0);  // never oneDNN's reference (slow) kernel
  }
}

TEST_CASE("PackedLinear rejects bad weights and inputs with typed errors", "[torch][linear]") {
  REQUIRE_THROWS_AS(tb::PackedLinear(at::zeros({4})), sd::ShapeError);
  REQUIRE_THROWS_AS(tb::PackedLinear(at::zeros({2, 3, 4})), sd::ShapeError);
  REQUIRE_THROWS_AS(tb::PackedLinear(at::zeros({0, 4})), sd::ShapeError);
  REQUIRE_THROWS_AS(tb::PackedLinear(at::zeros({4, 3}, at::kDouble)), sd::InvalidArgumentError);
  REQUIRE_THROWS_AS(tb::PackedLinear(at::zeros({4, 3}, at::kHalf)), sd::InvalidArgumentError);

  const tb::PackedLinear linear(at::randn({6, 5}));
  REQUIRE_THROWS_AS(linear(at::zeros({2, 4})), sd::ShapeError);  // wrong inner dimension
  REQUIRE_THROWS_AS(linear(at::zeros({5})), sd::ShapeError);
  REQUIRE_THROWS_AS(linear(at::zeros({1, 2, 5})), sd::ShapeError);
  REQUIRE_THROWS_AS(linear(at::zeros({2, 5}, at::kDouble)), sd::InvalidArgumentError);
  REQUIRE_THROWS_AS(linear(at::zeros({0, 5})), sd::InvalidArgumentError);

  std::vector<float> x(10, 1.0f), y(12, 0.0f);
  REQUIRE_THROWS_AS(linear.forward(x.data(), 0, y.data()), sd::InvalidArgumentError);
  REQUIRE_THROWS_AS(linear.forward(x.data(), -3, y.data()), sd::InvalidArgumentError);
  REQUIRE_THROWS_AS(linear.forward(nullptr, 2, y.data()), sd::InvalidArgumentError);
  REQUIRE_THROWS_AS(linear.implementation(0), sd::InvalidArgumentError);
  linear.forward(x.data(), 2, y.data());  // still usable after the errors
  CHECK(y[0] != 0.0f);
}

TEST_CASE("bf16 PackedLinear is the f32 product of bf16-rounded operands, with and without the residual",
          "[torch][linear][bf16]") {
  REQUIRE_THROWS_AS(tb::PackedLinear(at::zeros({4, 4}), sd::DType::kF16), sd::InvalidArgumentError);
  REQUIRE_THROWS_AS(tb::PackedLinear(at::zeros({4, 4}), sd::DType::kF64), sd::InvalidArgumentError);
  if (!tb::PackedLinear::native_bf16()) {
    WARN("this CPU has no native bf16 matmul: bf16 PackedLinear not exercised");
    return;
  }
  at::manual_seed(11);
  using K = tb::PackedLinear::Kernel;
  for (const auto kernel : {K::kAuto, K::kOneDnn})
  for (const auto& [out, in] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{1408, 512}, {97, 33}, {130, 1000}, {8000, 512}}) {
    const at::Tensor w = at::randn({out, in}) / std::sqrt(static_cast<double>(in));
    const tb::PackedLinear lin(w, sd::DType::kBF16, kernel);
    CHECK(lin.storage() == sd::DType::kBF16);
    CHECK(lin.implementation(1).find(kernel == K::kAuto ? "specdec:avx512_bf16" : "brg:avx512_core_bf16") !=
          std::string::npos);
    const at::Tensor w16 = w.to(at::kBFloat16).to(at::kFloat);
    for (const std::int64_t m : {1, 5, 7, 16, 300}) {
      INFO(out << "x" << in << ", " << m << " rows, " << (kernel == K::kAuto ? "row kernel" : "oneDNN"));
      const at::Tensor x = at::randn({m, in});
      const at::Tensor x16 = x.to(at::kBFloat16).to(at::kFloat);
      const at::Tensor y = lin(x);
      check_close(y, x16, w16);  // only the f32 summation order differs
      // The rounding is real: against the unrounded product the error is bf16-sized.
      const double vs_f32 = ((y - at::matmul(x, w.t())).norm() / at::matmul(x, w.t()).norm()).item<double>();
      CHECK(vs_f32 > 1e-4);
      CHECK(vs_f32 < 2e-2);
      // forward_add: y0 + x W^T in place.
      at::Tensor acc = at::randn({m, out});
      const at::Tensor before = acc.clone();
      lin.forward_add(x.contiguous().data_ptr<float>(), m, acc.data_ptr<float>());
      CHECK(((acc - before - y).abs().max() / y.abs().max()).item<double>() < 1e-5);
      // Each row is computed the same way whatever the other rows are.
      if (kernel == K::kAuto)
        for (const std::int64_t r : {std::int64_t{0}, m - 1}) CHECK(at::equal(lin(x.narrow(0, r, 1)), y.narrow(0, r, 1)));
    }
  }
}

TEST_CASE("bf16 PackedLinear rounds its input rows to nearest even, exactly", "[torch][linear][bf16]") {
  if (!tb::PackedLinear::native_bf16()) {
    WARN("this CPU has no native bf16 matmul: bf16 rounding not exercised");
    return;
  }
  // An identity weight returns each input rounded to bf16: one exact product
  // per output, every other product an exact zero.
  constexpr std::int64_t kIn = 37;  // two whole vectors of 16 and a tail
  const tb::PackedLinear identity(at::eye(kIn), sd::DType::kBF16);
  at::manual_seed(13);
  at::Tensor x = at::randn({3, kIn}) * 100;
  auto* bits = reinterpret_cast<std::uint32_t*>(x.data_ptr<float>());
  // Ties go to the even neighbour; values just below the bf16 maximum stay
  // finite. (Denormals are left out: VDPBF16PS treats them as zero.)
  const std::uint32_t special[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x3f80c000u, 0x3f804000u,
                                   0x00800000u, 0x80818000u, 0x7f7f0000u, 0x3f7fffffu, 0x00000000u};
  for (std::size_t i = 0; i < std::size(special); ++i) bits[i * 4 + 1] = special[i];
  const at::Tensor y = identity(x), expected = x.to(at::kBFloat16).to(at::kFloat);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    INFO("input " << i << ": bits " << std::hex << bits[i]);
    CHECK(y.view(-1)[i].item<float>() == expected.view(-1)[i].item<float>());
  }
}

TEST_CASE("PackedLinear over a row source equals the product of the filled rows", "[torch][linear]") {
  at::manual_seed(14);
  // Each row is 2 x + r: made on the fly, as the decoder layer makes its
  // norms and SwiGLU rows.
  struct Doubled {
    const float* x;
    std::int64_t in;
    static void fill(const void* self, std::int64_t r, float* out) {
      const auto& d = *static_cast<const Doubled*>(self);
      for (std::int64_t j = 0; j < d.in; ++j) out[j] = 2.0f * d.x[r * d.in + j] + static_cast<float>(r);
    }
  };
  const at::Tensor w = at::randn({200, 96}) / 10;
  for (const auto storage : {sd::DType::kF32, sd::DType::kBF16}) {
    if (storage == sd::DType::kBF16 && !tb::PackedLinear::native_bf16()) continue;
    const tb::PackedLinear lin(w, storage);
    for (const std::int64_t m : {1, 3, 4, 16, 30}) {  // below and above the rows the team fills
      INFO(sd::dtype_name(storage) << ", " << m << " rows");
      const at::Tensor x = at::randn({m, 96});
      const Doubled source{x.data_ptr<float>(), 96};
      const at::Tensor filled = 2 * x + at::arange(m, at::kFloat).unsqueeze(1);
      at::Tensor y = at::empty({m, 200});
      lin.forward(tb::PackedLinear::RowSource{&Doubled::fill, &source}, m, y.data_ptr<float>());
      CHECK(at::equal(y, lin(filled)));
      at::Tensor acc = at::randn({m, 200});
      const at::Tensor expected = acc.clone();
      lin.forward_add(filled.data_ptr<float>(), m, expected.data_ptr<float>());
      lin.forward_add(tb::PackedLinear::RowSource{&Doubled::fill, &source}, m, acc.data_ptr<float>());
      CHECK(at::equal(acc, expected));
    }
    float out = 0.0f;
    CHECK_THROWS_AS(lin.forward(tb::PackedLinear::RowSource{}, 1, &out), sd::InvalidArgumentError);
    const Doubled none{nullptr, 96};
    CHECK_THROWS_AS(lin.forward(tb::PackedLinear::RowSource{&Doubled::fill, &none}, 0, &out),
                    sd::InvalidArgumentError);
  }
}

TEST_CASE("forward_add adds x W^T to y in f32 too", "[torch][linear]") {
  at::manual_seed(12);
  const at::Tensor w = at::randn({64, 48});
  const tb::PackedLinear lin(w);
  for (const std::int64_t m : {1, 7, 260}) {
    const at::Tensor x = at::randn({m, 48});
    at::Tensor y = at::randn({m, 64});
    const at::Tensor expected = y + at::matmul(x, w.t());
    lin.forward_add(x.data_ptr<float>(), m, y.data_ptr<float>());
    CHECK(((y - expected).abs().max() / expected.abs().max()).item<double>() < 1e-5);
  }
  float x = 0.0f;
  CHECK_THROWS_AS(lin.forward_add(&x, 0, &x), sd::InvalidArgumentError);
  CHECK_THROWS_AS(lin.forward_add(nullptr, 1, &x), sd::InvalidArgumentError);
}

TEST_CASE("choose_inference_dtype grants f32 and bf16, falls back where bf16 is not native, refuses the rest",
          "[torch][bf16]") {
  CHECK(tb::choose_inference_dtype("f32").dtype == sd::DType::kF32);
  CHECK(tb::choose_inference_dtype("f32").note.empty());
  const auto bf16 = tb::choose_inference_dtype("bf16");
  const auto automatic = tb::choose_inference_dtype("auto");
  CHECK(automatic.note.empty());
  if (tb::PackedLinear::native_bf16()) {
    CHECK(bf16.dtype == sd::DType::kBF16);
    CHECK(bf16.note.empty());
    CHECK(automatic.dtype == sd::DType::kBF16);
  } else {
    CHECK(bf16.dtype == sd::DType::kF32);
    CHECK(bf16.note.find("no native bf16") != std::string::npos);
    CHECK(automatic.dtype == sd::DType::kF32);
  }
  CHECK_THROWS_AS(tb::choose_inference_dtype("f16"), sd::UnsupportedError);
  CHECK_THROWS_AS(tb::choose_inference_dtype("fp32"), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::choose_inference_dtype(""), sd::InvalidArgumentError);
  CHECK(tb::inference_dtype_name(sd::DType::kBF16) == "bf16");
  CHECK(tb::inference_dtype_name(sd::DType::kF32) == "f32");
}
