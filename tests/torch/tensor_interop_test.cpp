#include <ATen/ATen.h>

#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/torch/tensor_interop.hpp"
#include "support/catch.hpp"

namespace sd = specdec;
namespace tb = specdec::torch_backend;

TEST_CASE("A libtorch tensor becomes a TensorView of the same memory and back", "[torch]") {
  const at::Tensor t = at::arange(24, at::kFloat).reshape({2, 3, 4});
  const auto v = tb::view_of(t);
  CHECK(v.data() == t.data_ptr());
  CHECK(v.dtype() == sd::DType::kF32);
  CHECK(v.ndim() == 3);
  CHECK(v.size(2) == 4);
  CHECK(v.stride(0) == 12);
  const at::Tensor back = tb::tensor_of(v);
  CHECK(back.data_ptr() == t.data_ptr());
  CHECK(at::equal(back, t));
  // Non-contiguous views keep their strides.
  const at::Tensor tr = t.transpose(1, 2);
  const auto tv = tb::view_of(tr);
  CHECK_FALSE(tv.is_contiguous());
  CHECK(at::equal(tb::tensor_of(tv), tr));
}

TEST_CASE("Softmax rows from libtorch feed the acceptance rules directly", "[torch]") {
  at::manual_seed(0);
  const at::Tensor target = at::softmax(at::randn({3, 50}), 1);
  sd::DraftTree tree(0);
  tree.set_children_source(sd::DraftTree::kRoot, -1, sd::ChildMode::kDeterministic);
  const auto a = tree.add_node(sd::DraftTree::kRoot, target[0].argmax().item<int>(), 1.0f);
  tree.set_children_source(a, -1, sd::ChildMode::kDeterministic);
  tree.add_node(a, 7, 1.0f);
  sd::RecursiveRejectionSampling rule;
  sd::RandomStream rng(1);
  const auto r = rule.verify(tree, tb::prob_rows_of(target), {}, rng);
  CHECK(r.bonus_token >= 0);
  CHECK(r.bonus_token < 50);
}

TEST_CASE("prob_rows_of rejects tensors the rules cannot read", "[torch]") {
  REQUIRE_THROWS_AS(tb::prob_rows_of(at::zeros({4})), sd::ShapeError);
  REQUIRE_THROWS_AS(tb::prob_rows_of(at::zeros({2, 4}, at::kDouble)), sd::UnsupportedError);
  REQUIRE_THROWS_AS(tb::prob_rows_of(at::zeros({4, 3}).t()), sd::ShapeError);
  REQUIRE_THROWS_AS(tb::dtype_of(at::kComplexFloat), sd::UnsupportedError);
}
