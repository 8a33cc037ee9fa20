// The parts of slem and tli (Timor et al., arXiv 2502.05202): a draft model
// with its own tokenizer, loaded by the method (MethodHooks::load_model and
// load_vocabulary), the two vocabularies and their map, and an engine whose
// drafter is a cross-vocabulary Wrap<ModelDrafter> over the draft model.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/draft/vocabulary_map.hpp"
#include "specdec/methods/method_parts.hpp"

namespace specdec::methods {

// The draft= and vocabulary= parameters of both methods.
inline std::vector<MethodParam> other_vocabulary_params() {
  return {{"draft", ParamType::kText, "",
           "the draft model's directory, with its tokenizer.model (default: <models>/draft-4k)"},
          {"vocabulary", ParamType::kText, "", "the target's tokenizer (default: <models>/tokenizer.model)"}};
}

// The draft, its vocabulary and the target's, and their map; behind a
// pointer, since the map points at both vocabularies.
template <class M>
struct OtherVocabularyDraft {
  std::unique_ptr<M> model;
  TextVocabulary draft, target;
  std::unique_ptr<VocabularyMap> map;
};

template <class M>
std::unique_ptr<OtherVocabularyDraft<M>> load_other_vocabulary_draft(const MethodContext<M>& c) {
  const auto& name = c.config.name;
  if (!c.hooks.load_model || !c.hooks.load_vocabulary)
    throw InvalidArgumentError(fmt::format(
        "method {}: this backend cannot load a draft model and its tokenizer (MethodHooks::load_model, "
        "load_vocabulary)",
        name));
  const auto dir =
      c.config.text("draft").empty() ? c.dir / "draft-4k" : std::filesystem::path(c.config.text("draft"));
  const auto target_tokenizer = c.config.text("vocabulary").empty()
                                    ? c.dir / "tokenizer.model"
                                    : std::filesystem::path(c.config.text("vocabulary"));
  auto d = std::make_unique<OtherVocabularyDraft<M>>();
  d->model = c.hooks.load_model(dir);
  if (c.hooks.match_target) c.hooks.match_target(*d->model, c.target);
  d->draft = c.hooks.load_vocabulary(dir / "tokenizer.model");
  d->target = c.hooks.load_vocabulary(target_tokenizer);
  if (d->draft.size() != d->model->vocab_size())
    throw InvalidArgumentError(fmt::format("method {}: the draft in {} has vocabulary {}, its tokenizer {}",
                                           name, dir.string(), d->model->vocab_size(), d->draft.size()));
  if (d->target.size() != c.target.vocab_size())
    throw InvalidArgumentError(fmt::format("method {}: the target has vocabulary {}, the tokenizer {} has {}",
                                           name, c.target.vocab_size(), target_tokenizer.string(),
                                           d->target.size()));
  d->map = std::make_unique<VocabularyMap>(d->draft, d->target);
  return d;
}

// Wrap<Inner>: StringMatchDrafter or IntersectionDrafter; `args` follow the
// map in its constructor.
template <class M, template <class> class Wrap, class Builder, class Rule>
class OtherVocabularyParts {
 public:
  using Timed = TimedModel<M>;
  using Drafter = Wrap<ModelDrafter<Timed>>;
  using Verifier = target_verifier_t<Timed>;
  using Engine = SpeculativeEngine<Drafter, Builder, Verifier, Rule, RuntimePolicy>;
  using Slot = RequestSlot<Engine, Drafter, RuntimePolicy>;

  template <class... Args>
  OtherVocabularyParts(const MethodContext<M>& c, std::unique_ptr<OtherVocabularyDraft<M>> draft,
                       Builder builder, Rule rule, RuntimePolicy policy, Args... args)
      : owned_(std::move(draft)),
        target_(c.target),
        draft_(*owned_->model),
        verifier_(TargetVerifier<Timed>::make(target_)),
        policy_(std::move(policy)),
        engine_(std::move(builder), verifier_, std::move(rule)),
        make_([this, args...](std::int32_t seq) {
          return Drafter(ModelDrafter<Timed>(draft_, seq), *owned_->map, args...);
        }) {
    engine_.set_target_clock(&target_.clock());
  }

  Engine& engine() { return engine_; }
  std::unique_ptr<Slot> slot(std::int32_t seq, const GenerationOptions& options, TokenCallback on_token) {
    auto s = std::make_unique<Slot>(
        std::monostate{}, [&](std::monostate&) { return make_(seq); }, policy_, seq, options,
        std::move(on_token));
    s->request.set_draft_clock(&draft_.clock());
    return s;
  }

 private:
  std::unique_ptr<OtherVocabularyDraft<M>> owned_;
  Timed target_, draft_;
  Verifier verifier_;
  RuntimePolicy policy_;
  Engine engine_;
  std::function<Drafter(std::int32_t)> make_;
};

}  // namespace specdec::methods
