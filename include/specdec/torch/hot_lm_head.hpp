// A drafter's LM head over only the H most frequent tokens: frequency-ranked
// drafting (FR-Spec, arXiv 2502.14856). A small drafter
// spends much of its step in the LM head (vocab × hidden); restricted to the
// hot rows it reads H/vocab of them. Tokens outside the hot set get logit
// -inf, probability 0: they are never drafted. The target is untouched, so
// every lossless rule stays lossless (a token the draft cannot propose is
// still produced by the residual distribution, as any token with q = 0 is).
//
// Used by LlamaModel (a draft model) and DraftHead (the Lyanna and EAGLE-style
// heads); `hot=H` on the methods (methods.hpp) turns it on.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "specdec/core/tensor_view.hpp"
#include "specdec/core/types.hpp"
#include "specdec/cpu/linear.hpp"
#include "specdec/torch/packed_linear.hpp"

namespace specdec::torch_backend {

class HotLmHead final : public cpu::Linear {
 public:
  // The rows `tokens` of lm_head [vocab, hidden], packed in `storage`.
  // Throws InvalidArgumentError for an empty list, a repeated token or one
  // outside the vocabulary.
  HotLmHead(const at::Tensor& lm_head, std::vector<TokenId> tokens, DType storage);

  std::span<const TokenId> tokens() const { return tokens_; }
  // The same hot tokens of `lm_head`, packed in `storage` (a model changing
  // its inference precision).
  std::shared_ptr<const HotLmHead> repacked(const at::Tensor& lm_head, DType storage) const {
    return std::make_shared<const HotLmHead>(lm_head, tokens_, storage);
  }
  std::int64_t vocab_size() const { return vocab_; }

  // As a cpu::Linear [vocab, hidden] (a model's LM head): out [rows, vocab]
  // = the hot tokens' logits of h [rows, hidden], -inf elsewhere (forward_add
  // adds those). Safe to call from several threads.
  std::int64_t in_features() const override { return rows_.in_features(); }
  std::int64_t out_features() const override { return vocab_; }
  void forward(const float* h, std::int64_t rows, float* out) const override;
  void forward_add(const float* h, std::int64_t rows, float* out) const override;
  void forward(RowSource rows, std::int64_t m, float* out) const override;
  void forward_add(RowSource rows, std::int64_t m, float* out) const override;

 private:
  std::vector<TokenId> tokens_;
  std::int64_t vocab_;
  PackedLinear rows_;
};

// The `how_many` most frequent tokens (ties to the lower id) of a token
// frequency file: the JSON `specdec hot-tokens --out` writes, whose "counts"
// holds one count per vocabulary id. Throws ModelLoadError naming the file
// when it is missing, malformed or of another vocabulary size, and
// InvalidArgumentError for how_many outside 1..vocab.
std::vector<TokenId> hot_vocabulary(const std::filesystem::path& frequencies, std::int64_t how_many,
                                    std::int64_t vocab);

}  // namespace specdec::torch_backend
