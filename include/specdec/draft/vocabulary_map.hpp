// How a draft's vocabulary relates to the target's when they differ (Timor et
// al., arXiv 2502.05202): which draft tokens are also target tokens (the
// intersection TLI drafts from, §3.3), and the draft's spelling of target
// text (both SLEM and TLI keep the draft's context as draft tokens spelling
// exactly the target's committed text).
//
// A draft token and a target token are the same token when they are of the
// same kind and spell the same bytes: "▁the" in both SentencePiece models,
// <0x0A> in both. A text token and a byte token spelling the same byte stay
// apart (each model reads them differently). Control tokens match by role:
// BOS with BOS, EOS with EOS; other control tokens match nothing.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"
#include "specdec/draft/text_vocabulary.hpp"

namespace specdec {

class VocabularyMap {
 public:
  // Both vocabularies must outlive the map.
  VocabularyMap(const TextVocabulary& draft, const TextVocabulary& target)
      : draft_(&draft), target_(&target) {
    to_target_.assign(static_cast<std::size_t>(draft.size()), kNoToken);
    to_draft_.assign(static_cast<std::size_t>(target.size()), kNoToken);
    std::unordered_map<std::string, TokenId> target_keys;
    for (TokenId t = 0; t < target.size(); ++t)
      if (target.kind(t) != TextVocabulary::Kind::kControl) target_keys.try_emplace(key(target, t), t);
    for (TokenId d = 0; d < draft.size(); ++d) {
      if (draft.kind(d) == TextVocabulary::Kind::kControl) continue;
      if (const auto it = target_keys.find(key(draft, d)); it != target_keys.end()) link(d, it->second);
    }
    if (draft.bos() != kNoToken && target.bos() != kNoToken) link(draft.bos(), target.bos());
    if (draft.eos() != kNoToken && target.eos() != kNoToken) link(draft.eos(), target.eos());
    // Each target token's draft spelling, once (translate() reads it).
    spelling_start_.reserve(static_cast<std::size_t>(target.size()) + 1);
    std::string bytes;
    for (TokenId t = 0; t < target.size(); ++t) {
      spelling_start_.push_back(static_cast<std::int32_t>(spellings_.size()));
      if (const auto d = to_draft(t); d != kNoToken) {
        spellings_.push_back(d);
      } else if (target.kind(t) != TextVocabulary::Kind::kControl) {
        draft.encode(target.bytes(t), spellings_);
      }
    }
    spelling_start_.push_back(static_cast<std::int32_t>(spellings_.size()));
  }

  const TextVocabulary& draft() const { return *draft_; }
  const TextVocabulary& target() const { return *target_; }
  // Tokens in both vocabularies.
  std::int64_t shared() const { return shared_; }
  // The same token in the other vocabulary, kNoToken outside the intersection.
  TokenId to_target(TokenId draft_token) const {
    return to_target_[checked(draft_token, draft_->size(), "draft")];
  }
  TokenId to_draft(TokenId target_token) const {
    return to_draft_[checked(target_token, target_->size(), "target")];
  }
  // Every (draft, target) pair of the intersection (text and byte tokens in
  // draft order, then BOS and EOS).
  std::span<const std::pair<TokenId, TokenId>> pairs() const { return pairs_; }

  // Appends draft tokens spelling `target_tokens`, token by token: a shared
  // token as itself, any other as the draft's encoding of its bytes (a
  // control token without a counterpart spells nothing). Draft tokens never
  // straddle two target tokens: what a round commits is translated without
  // looking at what came before it.
  void translate(std::span<const TokenId> target_tokens, std::vector<TokenId>& out) const {
    for (const TokenId t : target_tokens) {
      const auto i = checked(t, target_->size(), "target");
      out.insert(out.end(), spellings_.begin() + spelling_start_[i],
                 spellings_.begin() + spelling_start_[i + 1]);
    }
  }

  // Appends the draft's own encoding of the text of `target_tokens` (as it
  // would encode that text read from a file): runs of text are encoded
  // whole, control tokens translated by role. A prompt is spelled this way.
  void respell(std::span<const TokenId> target_tokens, std::vector<TokenId>& out) const {
    std::string run;
    for (const TokenId t : target_tokens) {
      if (target_->kind(t) != TextVocabulary::Kind::kControl) {
        run.append(target_->bytes(t));
        continue;
      }
      draft_->encode(run, out);
      run.clear();
      if (const auto d = to_draft(t); d != kNoToken) out.push_back(d);
    }
    draft_->encode(run, out);
  }

 private:
  static std::string key(const TextVocabulary& v, TokenId id) {
    std::string k(1, v.kind(id) == TextVocabulary::Kind::kByte ? 'b' : 't');
    k.append(v.bytes(id));
    return k;
  }
  void link(TokenId d, TokenId t) {
    if (to_target_[static_cast<std::size_t>(d)] != kNoToken ||
        to_draft_[static_cast<std::size_t>(t)] != kNoToken)
      return;  // a duplicate spelling: the first token keeps it
    to_target_[static_cast<std::size_t>(d)] = t;
    to_draft_[static_cast<std::size_t>(t)] = d;
    pairs_.emplace_back(d, t);
    ++shared_;
  }
  static std::size_t checked(TokenId id, std::int64_t size, const char* which) {
    if (id < 0 || id >= size)
      throw InvalidArgumentError(
          fmt::format("VocabularyMap: {} token {} is outside [0, {})", which, id, size));
    return static_cast<std::size_t>(id);
  }

  const TextVocabulary* draft_;
  const TextVocabulary* target_;
  std::vector<TokenId> to_target_, to_draft_;
  std::vector<std::pair<TokenId, TokenId>> pairs_;
  std::int64_t shared_ = 0;
  std::vector<std::int32_t> spelling_start_;
  std::vector<TokenId> spellings_;
};

}  // namespace specdec
