// cuda::plan_forward and its checks (host code; no device): which cache rows
// a forward's tokens are written to, which keys each may see, and the errors
// the host model throws for the same inputs.
#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "specdec/core/bit_matrix.hpp"
#include "specdec/core/error.hpp"
#include "specdec/cuda/forward_plan.hpp"
#include "support/catch.hpp"

namespace sd = specdec;
using sd::cuda::CacheState;
using sd::cuda::plan_forward;
using Positions = sd::CachePolicy::Positions;

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

namespace {

// A sink + window cache simulated on labels (host; no device): each row
// holds the label of the token whose key and value it holds, forwards write
// their tokens' labels where the plan says, accepts make plan_accept's moves
// one after the other, as the kernel does. After every accept the rows must
// hold exactly the kept tokens (the sink's first `sink`, the last `window`),
// each where row_of says, and the sink's copies the sink's labels.
struct SimulatedCache {
  CacheState state;
  std::vector<std::int64_t> rows, sink_rows;
  std::vector<std::int64_t> committed;  // the label of every committed token
  std::vector<std::int64_t> staged;     // the labels of the staged tokens
  std::int64_t next_label = 1000;

  SimulatedCache(std::int64_t sink, std::int64_t window, Positions positions, std::int64_t capacity) {
    state.capacity = capacity;
    state.policy = sd::CachePolicy::sink_window(sink, window, positions);
    rows.assign(static_cast<std::size_t>(capacity), -1);
    sink_rows.assign(static_cast<std::size_t>(sink), -1);
  }

  // Stages `n` new tokens (a causal chain) after `before` kept staged ones;
  // returns the plan's rows.
  std::vector<sd::cuda::TokenPlan> forward(std::int64_t n, bool extend) {
    std::vector<sd::TokenId> tokens(static_cast<std::size_t>(n), 1);
    std::vector<std::int64_t> positions(static_cast<std::size_t>(n));
    const std::int64_t before = extend ? state.staged : 0;
    for (std::int64_t i = 0; i < n; ++i) positions[static_cast<std::size_t>(i)] = state.length + before + i;
    const sd::SequenceInput in{0, tokens, positions, {}, extend};
    auto plan =
        plan_forward(sd::ForwardRequest{std::span(&in, 1), {}, {}, -1}, std::span(&state, 1), 10, 4096);
    if (plan.rows_needed[0] > state.capacity) {  // the model grows the buffer, keeping its rows
      state.capacity = plan.rows_needed[0];
      rows.resize(static_cast<std::size_t>(state.capacity), -1);
      plan = plan_forward(sd::ForwardRequest{std::span(&in, 1), {}, {}, -1}, std::span(&state, 1), 10, 4096);
    }
    if (!extend) staged.clear();
    for (const auto& r : plan.rows) {
      REQUIRE(r.write_row < state.capacity);
      REQUIRE(r.capacity == state.capacity);
      rows[static_cast<std::size_t>(r.write_row)] = next_label;
      staged.push_back(next_label++);
    }
    state.staged = plan.staged_after[0];
    return plan.rows;
  }

  void accept(const std::vector<std::int32_t>& path) {
    for (const auto& m : sd::cuda::plan_accept(path, state)) {
      if (m.sink_row >= 0)
        sink_rows[static_cast<std::size_t>(m.sink_row)] = rows[static_cast<std::size_t>(m.from)];
      rows[static_cast<std::size_t>(m.to)] = rows[static_cast<std::size_t>(m.from)];
    }
    for (const auto p : path) committed.push_back(staged[static_cast<std::size_t>(p)]);
    state.length += static_cast<std::int64_t>(path.size());
    state.staged = 0;
    staged.clear();
  }

  // The labels the committed prefix should hold, sorted.
  std::vector<std::int64_t> kept() const {
    std::vector<std::int64_t> want;
    const auto& p = state.policy;
    for (std::int64_t t = 0; t < state.length; ++t)
      if (t < p.sink || t >= state.length - p.window) want.push_back(committed[static_cast<std::size_t>(t)]);
    std::sort(want.begin(), want.end());
    return want;
  }
};

}  // namespace

TEST_CASE("plan_accept keeps a sink + window cache's sink and last window in their rows", "[unit]") {
  const auto positions = GENERATE(Positions::kText, Positions::kCache);
  std::mt19937 gen(41);
  const auto draw = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  for (int trial = 0; trial < 200; ++trial) {
    const auto sink = static_cast<std::int64_t>(draw(0, 4));
    const auto window = static_cast<std::int64_t>(draw(1, 12));
    SimulatedCache cache(sink, window, positions, sink + window + 4);
    CAPTURE(trial, sink, window);
    for (int round = 0; round < 30; ++round) {
      // A prompt, a chain, or a chain extended by a second forward; then a
      // random increasing path through the staged tokens.
      const auto n = static_cast<std::int64_t>(round == 0 ? draw(1, 40) : draw(1, 6));
      const auto rows = cache.forward(n, false);
      // Every new token sees exactly the committed prefix's rows: the kept tokens.
      std::vector<std::int64_t> prefix(cache.rows.begin(), cache.rows.begin() + rows[0].prefix);
      std::sort(prefix.begin(), prefix.end());
      REQUIRE(prefix == cache.kept());
      if (draw(0, 3) == 0) cache.forward(static_cast<std::int64_t>(draw(1, 3)), true);
      std::vector<std::int32_t> path;
      for (std::int32_t p = 0; p < static_cast<std::int32_t>(cache.staged.size()); ++p)
        if (p == 0 || draw(0, 2) != 0) path.push_back(p);
      cache.accept(path);
      const auto& st = cache.state;
      REQUIRE(st.visible() == std::min(st.length, sink + window));
      for (std::int64_t t = 0; t < st.length; ++t)
        if (t < sink || t >= st.length - window)
          REQUIRE(cache.rows[static_cast<std::size_t>(st.row_of(t))] ==
                  cache.committed[static_cast<std::size_t>(t)]);
      if (positions == Positions::kCache)
        for (std::int64_t s = 0; s < std::min(sink, st.length); ++s)
          REQUIRE(cache.sink_rows[static_cast<std::size_t>(s)] ==
                  cache.committed[static_cast<std::size_t>(s)]);
    }
  }
}

TEST_CASE("plan_accept on a dense cache moves the path down, and rollback refuses evicted tokens", "[unit]") {
  CacheState dense{0, 5, 4, 64};
  const std::vector<std::int32_t> path = {1, 2};
  const auto moves = sd::cuda::plan_accept(path, dense);
  REQUIRE(moves.size() == 2);
  CHECK((moves[0].from == 6 && moves[0].to == 5 && moves[0].sink_row == -1));
  CHECK((moves[1].from == 7 && moves[1].to == 6));
  const std::vector<std::int32_t> in_place = {0, 1};
  CHECK(sd::cuda::plan_accept(in_place, dense).empty());

  CacheState sparse{0, 9, 0, 72, sd::CachePolicy::sink_window(2, 6)};
  CHECK_NOTHROW(sd::cuda::check_rollback(0, 9, sparse));  // dropping what is staged
  CHECK_THROWS_WITH(sd::cuda::check_rollback(0, 8, sparse),
                    Catch::Contains("evicted 1") && Catch::Contains("roll back to 8"));
  sparse.length = 8;  // full, nothing evicted: the rows are the text's
  CHECK_NOTHROW(sd::cuda::check_rollback(0, 3, sparse));
  CHECK_THROWS_AS(sd::cuda::check_rollback(0, 9, sparse), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::cuda::check_rollback(0, -1, dense), sd::InvalidArgumentError);
}
