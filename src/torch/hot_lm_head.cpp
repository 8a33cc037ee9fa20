#include "specdec/torch/hot_lm_head.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/draft/token_info_table.hpp"
#include "specdec/io/token_frequencies.hpp"

namespace specdec::torch_backend {
namespace {

at::Tensor hot_rows(const at::Tensor& lm_head, const std::vector<TokenId>& tokens) {
  if (lm_head.dim() != 2) throw ShapeError("HotLmHead: the LM head must be [vocab, hidden]");
  const auto vocab = lm_head.size(0);
  if (tokens.empty()) throw InvalidArgumentError("HotLmHead: no hot tokens");
  std::vector<char> seen(static_cast<std::size_t>(vocab), 0);
  std::vector<std::int64_t> ids;
  ids.reserve(tokens.size());
  for (const auto t : tokens) {
    if (t < 0 || t >= vocab)
      throw InvalidArgumentError(fmt::format("HotLmHead: token {} is outside the vocabulary of {}", t, vocab));
    if (seen[static_cast<std::size_t>(t)]++)
      throw InvalidArgumentError(fmt::format("HotLmHead: token {} is listed twice", t));
    ids.push_back(t);
  }
  return lm_head.detach().index_select(0, at::tensor(ids, at::kLong)).contiguous();
}

}  // namespace

HotLmHead::HotLmHead(const at::Tensor& lm_head, std::vector<TokenId> tokens, DType storage)
    : tokens_(std::move(tokens)), vocab_(lm_head.size(0)), rows_(hot_rows(lm_head, tokens_), storage) {}

void HotLmHead::forward(const float* h, std::int64_t rows, float* out) const {
  const auto hot = static_cast<std::int64_t>(tokens_.size());
  std::vector<float> logits(static_cast<std::size_t>(rows * hot));
  rows_.forward(h, rows, logits.data());
  std::fill_n(out, rows * vocab_, -std::numeric_limits<float>::infinity());
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = out + r * vocab_;
    const float* src = logits.data() + r * hot;
    for (std::int64_t j = 0; j < hot; ++j) row[tokens_[static_cast<std::size_t>(j)]] = src[j];
  }
}

void HotLmHead::forward_add(const float* h, std::int64_t rows, float* out) const {
  std::vector<float> logits(static_cast<std::size_t>(rows * vocab_));
  forward(h, rows, logits.data());
  for (std::size_t i = 0; i < logits.size(); ++i) out[i] += logits[i];
}

namespace {
std::vector<float> filled(cpu::Linear::RowSource rows, std::int64_t m, std::int64_t in) {
  std::vector<float> x(static_cast<std::size_t>(m * in));
  for (std::int64_t r = 0; r < m; ++r) rows.fill(rows.context, r, x.data() + r * in);
  return x;
}
}  // namespace

void HotLmHead::forward(RowSource rows, std::int64_t m, float* out) const {
  forward(filled(rows, m, in_features()).data(), m, out);
}
void HotLmHead::forward_add(RowSource rows, std::int64_t m, float* out) const {
  forward_add(filled(rows, m, in_features()).data(), m, out);
}

std::vector<TokenId> hot_vocabulary(const std::filesystem::path& frequencies, std::int64_t how_many,
                                    std::int64_t vocab) {
  const auto counts = io::read_token_frequencies(frequencies);
  if (static_cast<std::int64_t>(counts.size()) != vocab)
    throw ModelLoadError(fmt::format("{}: counts for a vocabulary of {}, the model has {}", frequencies.string(),
                                     counts.size(), vocab));
  if (how_many < 1 || how_many > vocab)
    throw InvalidArgumentError(fmt::format("hot vocabulary: {} tokens asked of a vocabulary of {}", how_many, vocab));
  return most_frequent_tokens(counts, how_many);
}

}  // namespace specdec::torch_backend
