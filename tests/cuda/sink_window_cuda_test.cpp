// cuda::LlamaModel's sink + window cache (CachePolicy; StreamingLLM, arXiv
// 2309.17453 §3.2) against the plain-loop reference that applies the
// StreamingLLM mask to a dense forward, with text positions (SPIRe) and
// positions within the cache (MagicDec): a prompt that grows the cache past
// its room, decode steps past the window, staged chains (one extended by a
// second forward, as a drafter's levels are) accepted across the window's
// boundary, and a forward that grows a cache whose window has wrapped (the
// schedule of tests/torch/sink_window_cache_test.cpp).
// Without a device the [cuda] tests WARN and pass; plan_accept's row moves
// are checked on the host in forward_plan_test.cpp.
#include <cuda_runtime.h>

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "device_support.hpp"
#include "specdec/core/error.hpp"
#include "specdec/cuda/llama_model.hpp"
#include "support/catch.hpp"
#include "support/reference_llama.hpp"
#include "support/sink_window_schedule.hpp"

namespace sd = specdec;
using sd::TokenId;
using Positions = sd::CachePolicy::Positions;

namespace {

struct Pair {
  sd::testing::ReferenceLlama ref;
  sd::cuda::LlamaModel gpu;
};
Pair make_pair(const char* dir_name) {
  sd::testing::ReferenceLlama ref(sd::testing::tiny_llama_config(32, 48, 2), 5, false);
  const auto dir = std::filesystem::temp_directory_path() / dir_name;
  std::filesystem::remove_all(dir);
  ref.save(dir);
  return {std::move(ref), sd::cuda::LlamaModel::load(dir, sd::DType::kF32)};
}

// Stages `tokens` after what sequence 0 holds (a prefill: no outputs).
void feed(sd::cuda::LlamaModel& m, const std::vector<TokenId>& tokens, std::int64_t first_position) {
  std::vector<std::int64_t> positions(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i)
    positions[i] = first_position + static_cast<std::int64_t>(i);
  const sd::SequenceInput in{0, tokens, positions};
  m.forward(sd::ForwardRequest{std::span(&in, 1)});
}

}  // namespace

TEST_CASE("cuda::LlamaModel: a sink + window cache equals a dense forward under the StreamingLLM mask",
          "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  const auto positions = GENERATE(Positions::kText, Positions::kCache);
  // A sink of 3 and a window of 10: 77 rows of room. Either the 79-token
  // prompt grows the empty cache for its forward (the schedule then fills
  // the context of 128), or a forward of 70 tokens grows it once its window
  // has wrapped (13 rows held + 70 > 77).
  const std::int64_t late = GENERATE(0, 70);
  CAPTURE(positions == Positions::kCache, late);
  auto [ref, m] =
      make_pair(positions == Positions::kText ? "specdec_cuda_sink_text" : "specdec_cuda_sink_cache");
  const std::int64_t sink = 3, window = 10, prompt = late > 0 ? 20 : 79;
  m.open(0, sd::CachePolicy::sink_window(sink, window, positions));
  const auto room = m.cache_rows(0);
  CHECK(room == sink + window + 64);

  std::int64_t rows_after_prompt = 0;
  const auto run = sd::testing::run_sink_window_schedule(
      m, prompt, [&] { rows_after_prompt = m.cache_rows(0); }, late);
  CHECK(rows_after_prompt == room);  // shrunk back once the prompt was accepted
  REQUIRE(m.cached_length(0) == static_cast<std::int64_t>(run.context.size()));
  CHECK(m.cache_rows(0) == room);  // constant as the sequence grows

  const auto e = sd::testing::sink_window_errors(run, ref, sink, window, positions == Positions::kCache);
  CHECK(e.streaming < 1e-4);
  CHECK(e.dense_last > 1e-3);  // the mask matters: a dense reference differs once tokens are evicted
  if (positions == Positions::kCache) CHECK(e.text_last > 1e-3);  // and so do the positions
}

TEST_CASE("cuda::LlamaModel: a sink + window cache refuses what it cannot do, by name", "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  auto [ref, m] = make_pair("specdec_cuda_sink_errors");
  CHECK_THROWS_AS(m.open(0, sd::CachePolicy::sink_window(-1, 8)), sd::InvalidArgumentError);
  CHECK_THROWS_AS(m.open(0, sd::CachePolicy::sink_window(2, 0)), sd::InvalidArgumentError);
  m.open(0, sd::CachePolicy::sink_window(2, 6));
  feed(m, {5, 6, 7, 8, 9}, 0);
  m.accept(0, std::vector<std::int32_t>{0, 1, 2, 3, 4});
  m.rollback(0, 3);  // nothing evicted yet: the rows are the text's
  feed(m, {8, 9, 10, 11, 12}, 3);
  m.accept(0, std::vector<std::int32_t>{0, 1, 2, 3, 4});
  REQUIRE(m.cached_length(0) == 8);  // sink 2 + window 6: full, nothing evicted
  m.rollback(0, 8);
  feed(m, {13}, 8);
  m.accept(0, std::vector<std::int32_t>{0});  // evicts token 2
  CHECK_THROWS_WITH(m.rollback(0, 8), Catch::Contains("evicted 1") && Catch::Contains("roll back to 8"));
  m.rollback(0, 9);  // dropping what is staged is fine
  // Reopened dense, the same sequence holds the whole context again.
  m.open(0);
  CHECK(m.cache_rows(0) == 128);
}
