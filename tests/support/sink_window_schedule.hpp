// A schedule of forwards that exercises a sink + window cache (CachePolicy)
// on any Model, and the record a reference needs to recompute it
// (ReferenceLlama::all_logits): a prompt in one forward, single tokens past
// the window, a staged chain of four with two kept, a chain staged in two
// forwards (the second extending the first, as a drafter's levels do) with
// three kept, single tokens again, a chain kept whole, and one more token.
// With `late` > 0, a forward of `late` tokens, all kept, replaces the single
// tokens and the whole chain: once tokens are evicted, a forward longer
// than a cache's staging room grows a cache whose window has wrapped.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/round.hpp"
#include "specdec/core/tensor_view.hpp"
#include "specdec/core/types.hpp"

namespace specdec::testing {

struct SinkWindowRun {
  std::vector<TokenId> context;             // the committed tokens
  std::vector<std::int64_t> committed;      // how many were committed when each ran
  std::vector<std::vector<float>> logits;   // the logits after each
};

// Runs the schedule on sequence 0 of `m`, opened by the caller. `after_prompt`
// is called once the prompt is accepted (a test reads the cache's size there).
template <class M, class AfterPrompt>
SinkWindowRun run_sink_window_schedule(M& m, std::int64_t prompt, AfterPrompt&& after_prompt,
                                       std::int64_t late = 0) {
  SinkWindowRun run;
  const auto vocab = static_cast<std::size_t>(m.vocab_size());
  std::int64_t cached = 0;
  std::vector<TokenId> staged;  // forwarded, not yet accepted
  std::vector<std::vector<float>> staged_logits;
  // Forwards `count` new tokens after what is staged (extending it, or after
  // the committed tokens), then keeps the first `keep` staged (0: none yet).
  const auto step = [&](std::size_t count, std::size_t keep) {
    std::vector<TokenId> tokens;
    std::vector<std::int64_t> positions;
    for (std::size_t i = 0; i < count; ++i) {
      const auto t = run.context.size() + staged.size() + i;
      tokens.push_back(static_cast<TokenId>((t * 37 + 11) % 97));
      positions.push_back(static_cast<std::int64_t>(t));
    }
    std::vector<float> logits(count * vocab);
    const SequenceInput in{0, tokens, positions, PackedMask{}, !staged.empty()};
    ForwardRequest request{std::span(&in, 1)};
    request.logits = TensorView(logits.data(), DType::kF32, {static_cast<std::int64_t>(count), m.vocab_size()});
    m.forward(request);
    for (std::size_t i = 0; i < count; ++i) {
      staged.push_back(tokens[i]);
      staged_logits.emplace_back(logits.begin() + static_cast<std::ptrdiff_t>(i * vocab),
                                 logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab));
    }
    if (keep == 0) return;
    std::vector<std::int32_t> path;
    for (std::size_t i = 0; i < keep; ++i) {
      run.context.push_back(staged[i]);
      run.committed.push_back(cached);
      run.logits.push_back(std::move(staged_logits[i]));
      path.push_back(static_cast<std::int32_t>(i));
    }
    m.accept(0, path);
    cached += static_cast<std::int64_t>(keep);
    staged.clear();
    staged_logits.clear();
  };
  step(static_cast<std::size_t>(prompt), static_cast<std::size_t>(prompt));
  after_prompt();
  for (int i = 0; i < 12; ++i) step(1, 1);
  step(4, 2);  // kept across the window's boundary
  step(2, 0);
  step(2, 3);  // staged in two forwards, kept into the second
  if (late > 0) {
    step(static_cast<std::size_t>(late), static_cast<std::size_t>(late));
  } else {
    for (int i = 0; i < 27; ++i) step(1, 1);
    step(4, 4);
  }
  step(1, 1);
  return run;
}

// Largest |got - want| over a row of logits, relative to its largest |want|.
inline double row_error(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0.0, scale = 0.0;
  for (std::size_t v = 0; v < want.size(); ++v) {
    err = std::max(err, std::abs(static_cast<double>(got[v]) - want[v]));
    scale = std::max(scale, std::abs(want[v]));
  }
  return err / scale;
}

// The largest row_error of a run against the reference's logits.
inline double worst_row_error(const SinkWindowRun& run, const std::vector<std::vector<double>>& want) {
  double worst = 0.0;
  for (std::size_t t = 0; t < run.logits.size(); ++t) worst = std::max(worst, row_error(run.logits[t], want[t]));
  return worst;
}

// A run's logits against a reference (ReferenceLlama::all_logits): the worst
// row error under the StreamingLLM mask it ran with (small when the cache is
// right), and its last row's error against a dense reference and, with
// cache positions, against text positions (both large: the mask and the
// positions matter, so the first check has power).
struct SinkWindowErrors {
  double streaming = 0.0, dense_last = 0.0, text_last = 0.0;
};
template <class Reference>
SinkWindowErrors sink_window_errors(const SinkWindowRun& run, const Reference& ref, std::int64_t sink,
                                    std::int64_t window, bool cache_positions) {
  SinkWindowErrors e;
  e.streaming =
      worst_row_error(run, ref.all_logits(run.context, run.committed, sink, window, cache_positions));
  const std::vector<std::int64_t> dense(run.context.size(), 0);
  e.dense_last = row_error(run.logits.back(), ref.all_logits(run.context, dense, 0, 1 << 20, false).back());
  if (cache_positions)
    e.text_last =
        row_error(run.logits.back(), ref.all_logits(run.context, run.committed, sink, window, false).back());
  return e;
}

}  // namespace specdec::testing
