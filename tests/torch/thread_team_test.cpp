// The row kernel on the forwards' thread team: products are bit-identical
// whatever the thread count (the team itself: tests/unit/threads).
#include <ATen/ATen.h>

#include <cstdint>

#include "specdec/cpu/threads.hpp"
#include "specdec/torch/packed_linear.hpp"
#include "support/catch.hpp"
#include "support/team_support.hpp"

namespace sd = specdec;
namespace tb = specdec::torch_backend;
using sd::test::ForwardThreads;
using sd::test::helpers_take_items;

TEST_CASE("The row kernel's products are bit-identical with one thread and two", "[torch][threads][linear]") {
  at::manual_seed(3);
  for (const auto dtype : {sd::DType::kF32, sd::DType::kBF16}) {
    if (dtype == sd::DType::kBF16 && !tb::PackedLinear::native_bf16()) {
      WARN("no native bf16 on this CPU: the bf16 row kernel is not exercised");  // oneDNN refuses the shape
      continue;
    }
    const at::Tensor w = at::randn({1000, 384}) / 20.0;
    const tb::PackedLinear lin(w, dtype);
    if (lin.implementation(1).rfind("specdec:", 0) != 0) {
      WARN("no row kernel on this CPU for " << sd::dtype_name(dtype));
      continue;
    }
    for (const std::int64_t m : {1, 5, 30}) {
      INFO(sd::dtype_name(dtype) << ", " << lin.implementation(m) << ", " << m << " rows");
      const at::Tensor x = at::randn({m, 384});
      at::Tensor one, two;
      {
        const ForwardThreads t(1);
        one = lin(x);
      }
      {
        const ForwardThreads t(2);
        if (!helpers_take_items()) {  // the product below is to run on two threads
          WARN("the cores stayed busy for 10 s: no helper ran, nothing to compare");
          return;
        }
        two = lin(x);
      }
      CHECK(at::equal(one, two));
    }
  }
}
