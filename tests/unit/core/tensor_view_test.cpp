#include <cstdint>
#include <vector>

#include <dlpack/dlpack.h>

#include "specdec/core/dlpack.hpp"
#include "specdec/core/tensor_view.hpp"
#include "support/catch.hpp"

using specdec::DType;
using specdec::TensorView;

TEST_CASE("TensorView describes contiguous row-major memory", "[unit][tensor]") {
  std::vector<float> buf(24);
  const TensorView v(buf.data(), DType::kF32, {2, 3, 4});
  CHECK(v.ndim() == 3);
  CHECK(v.numel() == 24);
  CHECK(v.stride(0) == 12);
  CHECK(v.stride(1) == 4);
  CHECK(v.stride(2) == 1);
  CHECK(v.is_contiguous());
  CHECK(v.data_as<float>() == buf.data());
  REQUIRE_THROWS_AS(v.data_as<std::int32_t>(), specdec::UnsupportedError);
  REQUIRE_THROWS_AS(v.size(3), specdec::ShapeError);
}

TEST_CASE("TensorView with strides detects non-contiguous layouts", "[unit][tensor]") {
  std::vector<float> buf(24);
  const std::int64_t shape[] = {4, 3};
  const std::int64_t transposed[] = {1, 4};
  const TensorView t(buf.data(), DType::kF32, shape, 2, transposed);
  CHECK_FALSE(t.is_contiguous());
  const std::int64_t bad_shape[] = {4, -1};
  REQUIRE_THROWS_AS(TensorView(buf.data(), DType::kF32, bad_shape, 2, nullptr), specdec::ShapeError);
}

TEST_CASE("TensorView round-trips through DLTensor without copying", "[unit][tensor]") {
  std::vector<std::int32_t> buf(6);
  const TensorView v(buf.data(), DType::kI32, {2, 3});
  const DLTensor t = specdec::to_dlpack(v);
  CHECK(t.data == buf.data());
  CHECK(t.ndim == 2);
  CHECK(t.shape[0] == 2);
  CHECK(t.shape[1] == 3);
  CHECK(t.strides[0] == 3);
  CHECK(t.dtype.code == kDLInt);
  CHECK(t.dtype.bits == 32);
  CHECK(t.device.device_type == kDLCPU);
  const TensorView back = specdec::from_dlpack(t);
  CHECK(back.data() == buf.data());
  CHECK(back.dtype() == DType::kI32);
  CHECK(back.size(1) == 3);
  CHECK(back.stride(0) == 3);
}

TEST_CASE("from_dlpack applies byte_offset, null strides and rejects what it cannot hold", "[unit][tensor]") {
  std::vector<float> buf(10);
  std::int64_t shape[] = {4};
  DLTensor t{};
  t.data = buf.data();
  t.device = {kDLCPU, 0};
  t.ndim = 1;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 2 * sizeof(float);
  const auto v = specdec::from_dlpack(t);
  CHECK(v.data_as<float>() == buf.data() + 2);
  CHECK(v.stride(0) == 1);
  t.dtype = {kDLFloat, 32, 4};
  REQUIRE_THROWS_AS(specdec::from_dlpack(t), specdec::UnsupportedError);
  t.dtype = {kDLComplex, 64, 1};
  REQUIRE_THROWS_AS(specdec::from_dlpack(t), specdec::UnsupportedError);
  t.dtype = {kDLFloat, 32, 1};
  t.device = {kDLVulkan, 0};
  REQUIRE_THROWS_WITH(specdec::from_dlpack(t), Catch::Contains("device type"));
}
