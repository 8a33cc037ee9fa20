// SuffixDecoding's index (draft/suffix_index.hpp): the cost of holding text
// (one append per committed token) and of a round's speculation, and the
// memory per token held. Text: a 32k vocabulary, phrases of 4-24 tokens drawn
// from a pool of 200, so that substrings repeat as in the agentic workload.
// Counters: ns per appended token, nodes and bytes per token held. And the
// global cache's turnover: an eviction and a new response.
#include <cstdint>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "specdec/draft/suffix_drafter.hpp"
#include "specdec/draft/suffix_index.hpp"

namespace specdec::bench {
namespace {

// n tokens of phrases from one fixed pool, in an order `seed` picks.
std::vector<TokenId> repetitive_text(std::size_t n, std::uint32_t seed) {
  std::mt19937 pool(0), rng(seed);
  std::uniform_int_distribution<TokenId> token(0, 31999);
  std::vector<std::vector<TokenId>> phrases(200);
  for (auto& p : phrases) {
    p.resize(4 + pool() % 21);
    for (auto& t : p) t = token(pool);
  }
  std::vector<TokenId> text;
  while (text.size() < n) {
    const auto& p = phrases[rng() % phrases.size()];
    text.insert(text.end(), p.begin(), p.end());
    if (rng() % 4 == 0) text.push_back(token(rng));  // a fresh token now and then
  }
  text.resize(n);
  return text;
}

// Appending `tokens` tokens, 8 at a time (a round's commit), to a fresh index.
void BM_SuffixIndex_Append(benchmark::State& state) {
  const auto depth = static_cast<std::int32_t>(state.range(0));
  const auto n = static_cast<std::size_t>(state.range(1));
  const auto text = repetitive_text(n, 1);
  std::int64_t nodes = 0, bytes = 0;
  for (auto _ : state) {
    SuffixIndex index(depth);
    for (std::size_t i = 0; i < n; i += 8)
      index.extend(0, std::span<const TokenId>(text).subspan(i, std::min<std::size_t>(8, n - i)));
    nodes = index.num_nodes();
    bytes = index.bytes();
    benchmark::DoNotOptimize(nodes);
  }
  // seconds / (value x iterations), with value = n x 1e-9: nanoseconds per token
  state.counters["ns_per_token"] =
      benchmark::Counter(static_cast<double>(n) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["nodes_per_token"] = static_cast<double>(nodes) / static_cast<double>(n);
  state.counters["bytes_per_token"] = static_cast<double>(bytes) / static_cast<double>(n);
}

// One round's speculation (16 tokens at most, factor 1) from an index
// holding `tokens` tokens, the pattern the last 64 tokens of other text from
// the same phrases.
void BM_SuffixIndex_Speculate(benchmark::State& state) {
  const auto depth = static_cast<std::int32_t>(state.range(0));
  const auto n = static_cast<std::size_t>(state.range(1));
  const auto text = repetitive_text(n, 2);
  SuffixIndex index(depth);
  index.extend(0, text);
  const auto queries = repetitive_text(4096, 3);
  const SuffixSpeculation o{.max_tokens = 16, .factor = 1.0, .min_prob = 0.1f, .tree = true};
  std::size_t at = 64;
  std::int64_t drafted = 0;
  for (auto _ : state) {
    const auto d = index.speculate(std::span<const TokenId>(queries).subspan(at - 64, 64), o);
    drafted += static_cast<std::int64_t>(d.tokens.size());
    at = at + 1 < queries.size() ? at + 1 : 64;
  }
  state.counters["drafted_per_call"] =
      static_cast<double>(drafted) / static_cast<double>(std::max<std::int64_t>(1, state.iterations()));
}

// A server's steady state: the global index full (`cached` responses of 512
// tokens), each new response evicting the oldest. Time per response: one
// removal and 512 appends.
void BM_SuffixCache_Turnover(benchmark::State& state) {
  const auto depth = static_cast<std::int32_t>(state.range(0));
  const auto cached = state.range(1);
  constexpr std::size_t kLength = 512;
  const auto text = repetitive_text(kLength * 64, 4);
  SuffixCache cache(depth, cached);
  std::size_t at = 0;
  const auto respond = [&] {
    const std::int32_t id = cache.start_response();
    cache.append(id, std::span<const TokenId>(text).subspan(at, kLength));
    at = (at + kLength) % text.size();
  };
  for (std::int64_t i = 0; i < cached; ++i) respond();
  for (auto _ : state) respond();
  state.counters["nodes_per_token"] =
      static_cast<double>(cache.index().num_nodes()) / static_cast<double>(cache.index().num_tokens());
}

BENCHMARK(BM_SuffixIndex_Append)
    ->Args({32, 512})  // a prompt: a request's own index at its first token
    ->Args({64, 4096})
    ->Args({64, 65536})
    ->Args({32, 65536})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SuffixIndex_Speculate)->Args({64, 65536})->Args({32, 65536})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SuffixCache_Turnover)->Args({32, 256})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace specdec::bench

BENCHMARK_MAIN();
