// What the Llama models' tests (CPU and CUDA) share: one sequence's forward
// into host logits, consecutive positions, and a row's logits against the
// plain-loops reference (reference_llama.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "specdec/core/round.hpp"
#include "specdec/core/types.hpp"
#include "support/catch.hpp"
#include "support/reference_llama.hpp"

namespace specdec::testing {

// One sequence's forward of `tokens` at `positions` (a causal chain, or
// `mask`), host logits.
template <class M>
std::vector<float> run(M& m, std::int32_t seq, const std::vector<TokenId>& tokens,
                       const std::vector<std::int64_t>& positions, PackedMask mask = {},
                       bool extend = false) {
  std::vector<float> logits(tokens.size() * static_cast<std::size_t>(m.vocab_size()));
  const std::vector<SequenceInput> seqs = {{seq, tokens, positions, mask, extend}};
  m.forward(
      {seqs,
       TensorView(logits.data(), DType::kF32, {static_cast<std::int64_t>(tokens.size()), m.vocab_size()}),
       {},
       -1});
  return logits;
}

inline std::vector<std::int64_t> positions_from(std::int64_t first, std::size_t n) {
  std::vector<std::int64_t> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = first + static_cast<std::int64_t>(i);
  return p;
}

// Row `row` of `logits` against the reference's logits after `context`.
inline void check_row(const std::vector<float>& logits, std::size_t row, const ReferenceLlama& ref,
                      const std::vector<TokenId>& context, double tolerance) {
  const auto want = ref.last_logits(context);
  double worst = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(logits[row * want.size() + i]) - want[i]));
  INFO("context of " << context.size() << " tokens, row " << row);
  CHECK(worst < tolerance);
}

}  // namespace specdec::testing
