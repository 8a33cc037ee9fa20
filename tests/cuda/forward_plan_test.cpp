// cuda::plan_forward and its checks (host code; no device): which cache rows
// a forward's tokens are written to, which keys each may see, and the errors
// the host model throws for the same inputs.
#include <cstdint>
#include <vector>

#include "specdec/core/bit_matrix.hpp"
#include "specdec/core/error.hpp"
#include "specdec/cuda/forward_plan.hpp"
#include "support/catch.hpp"

namespace sd = specdec;
using sd::cuda::CacheState;
using sd::cuda::plan_forward;

namespace {

bool sees(const sd::cuda::ForwardPlan& plan, std::size_t row, std::int64_t key) {
  const auto& r = plan.rows[row];
  if (key < r.prefix) return true;
  const std::int64_t j = key - r.prefix;
  if (j >= r.window) return false;
  if (r.mask_word < 0) return true;
  return (plan.mask_words[static_cast<std::size_t>(r.mask_word + j / 64)] >> (j % 64)) & 1u;
}

}  // namespace

TEST_CASE("plan_forward: a chain after a prefix, a tree with its mask, and staged tokens kept", "[unit]") {
  // Sequence 7: 10 committed tokens, 3 new (a causal chain).
  const std::vector<sd::TokenId> chain_tokens = {5, 6, 7};
  const std::vector<std::int64_t> chain_pos = {10, 11, 12};
  // Sequence 9: 4 committed, 2 staged kept, 2 new under a 4x4 mask where
  // new token 0 (row 2) sees staged 0 and itself, new token 1 (row 3) sees
  // staged 1 and itself.
  sd::BitMatrix mask(4);
  for (int i = 0; i < 4; ++i) mask.set(i, i);
  mask.set(1, 0);
  mask.set(2, 0);
  mask.set(3, 1);
  const std::vector<sd::TokenId> tree_tokens = {1, 2};
  const std::vector<std::int64_t> tree_pos = {6, 7};
  std::vector<sd::SequenceInput> seqs(2);
  seqs[0] = {7, chain_tokens, chain_pos, {}, false};
  seqs[1] = {9, tree_tokens, tree_pos, sd::PackedMask::of(mask), true};
  const std::vector<CacheState> caches = {{3, 10, 5}, {1, 4, 2}};
  const sd::ForwardRequest request{seqs, {}, {}, -1};
  const auto plan = plan_forward(request, caches, 100, 64);

  REQUIRE(plan.total() == 5);
  CHECK(plan.tokens == std::vector<std::int32_t>{5, 6, 7, 1, 2});
  // The chain drops sequence 7's 5 staged tokens: rows 10, 11, 12.
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(plan.rows[i].slot == 3);
    CHECK(plan.rows[i].position == 10 + static_cast<std::int32_t>(i));
    CHECK(plan.rows[i].write_row == 10 + static_cast<std::int32_t>(i));
    for (std::int64_t key = 0; key < 16; ++key)
      CHECK(sees(plan, i, key) == (key <= 10 + static_cast<std::int64_t>(i)));
  }
  // The tree keeps sequence 9's 2 staged tokens (rows 4, 5) and writes rows 6, 7.
  CHECK(plan.rows[3].slot == 1);
  CHECK(plan.rows[3].write_row == 6);
  CHECK(plan.rows[4].write_row == 7);
  CHECK(plan.rows[3].prefix == 4);
  CHECK(plan.rows[3].window == 4);
  const std::vector<bool> row2 = {true, true, true, true, true, false, true, false};
  const std::vector<bool> row3 = {true, true, true, true, false, true, false, true};
  for (std::int64_t key = 0; key < 8; ++key) {
    CHECK(sees(plan, 3, key) == row2[static_cast<std::size_t>(key)]);
    CHECK(sees(plan, 4, key) == row3[static_cast<std::size_t>(key)]);
  }
  CHECK(plan.max_keys() == 13);
  CHECK(plan.staged_after == std::vector<std::int64_t>{3, 4});
}

TEST_CASE("plan_forward and check_accept_path refuse what the host model refuses", "[unit]") {
  const std::vector<sd::TokenId> tokens = {1, 2};
  const std::vector<std::int64_t> positions = {0, 1}, one_position = {0};
  const std::vector<CacheState> one = {{0, 0, 0}}, two = {{0, 0, 0}, {1, 0, 0}};
  const auto plan_of = [&](sd::SequenceInput s, std::span<const CacheState> caches,
                           std::int64_t context = 8) {
    const std::vector<sd::SequenceInput> seqs(caches.size(), s);
    return plan_forward(sd::ForwardRequest{seqs, {}, {}, -1}, caches, 10, context);
  };
  CHECK_NOTHROW(plan_of({0, tokens, positions, {}, false}, one));
  CHECK_THROWS_AS(plan_of({0, tokens, one_position, {}, false}, one), sd::ShapeError);
  CHECK_THROWS_AS(plan_of({0, tokens, positions, {}, false}, one, 1),
                  sd::ShapeError);  // outgrows the context
  const std::vector<sd::TokenId> bad_token = {1, 10};
  CHECK_THROWS_AS(plan_of({0, bad_token, positions, {}, false}, one), sd::ShapeError);
  const std::vector<std::int64_t> far = {0, 8};
  CHECK_THROWS_AS(plan_of({0, tokens, far, {}, false}, one), sd::ShapeError);
  sd::BitMatrix three(3);
  CHECK_THROWS_AS(plan_of({0, tokens, positions, sd::PackedMask::of(three), false}, one), sd::ShapeError);
  CHECK_THROWS_AS(plan_of({0, tokens, positions, {}, false}, two), sd::InvalidArgumentError);  // seq 0 twice

  const CacheState staged{0, 5, 3};
  const std::vector<std::int32_t> good = {0, 2}, back = {1, 1}, out = {0, 3}, negative = {-1};
  CHECK_NOTHROW(sd::cuda::check_accept_path(good, staged));
  CHECK_THROWS_AS(sd::cuda::check_accept_path(back, staged), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::cuda::check_accept_path(out, staged), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::cuda::check_accept_path(negative, staged), sd::InvalidArgumentError);

  std::vector<float> host(6);
  const sd::TensorView ok(host.data(), sd::DType::kF32, {2, 3});
  const sd::Device gpu{sd::DeviceKind::kCUDA, 0};
  CHECK_FALSE(sd::cuda::output_on_device(ok, 2, 3, gpu, "logits"));
  CHECK(sd::cuda::output_on_device(sd::TensorView(host.data(), sd::DType::kF32, {2, 3}, gpu), 2, 3, gpu,
                                   "logits"));
  CHECK_THROWS_AS(sd::cuda::output_on_device(ok, 3, 2, gpu, "logits"), sd::ShapeError);
  CHECK_THROWS_AS(
      sd::cuda::output_on_device(sd::TensorView(host.data(), sd::DType::kI32, {2, 3}), 2, 3, gpu, "x"),
      sd::ShapeError);
  CHECK_THROWS_AS(sd::cuda::output_on_device(sd::TensorView(host.data(), sd::DType::kF32, {2, 3},
                                                            sd::Device{sd::DeviceKind::kCUDA, 1}),
                                             2, 3, gpu, "logits"),
                  sd::UnsupportedError);
}
