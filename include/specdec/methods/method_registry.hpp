// The method registry over any Model: every decoding method of the library by
// name, with its parameters, the models it needs, the papers it implements
// and how to build it from the one round engine's components, so that a
// command line or a host's own engine lists them and builds one from a spec
// "name[:key=value]..." (`specdec methods`; examples/host_engine).
//
//   MethodRegistry<MyModel> registry = standard_methods<MyModel>();  // methods/standard_methods.hpp
//   AnyDecoder chain = registry.make(registry.parse("chain:k=5"), target, &draft, sampling);
//   chain.begin(seq, prompt, options); chain.step(); ...
//
// A method is a recipe over the Model concept (methods/<name>.hpp): its
// MethodInfo names it, lists its parameters and builds its AnyDecoder from a
// MethodContext. A host adds methods of its own with add().
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/concepts.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/draft/text_vocabulary.hpp"
#include "specdec/engine/any_decoder.hpp"
#include "specdec/methods/method_config.hpp"
#include "specdec/methods/method_rules.hpp"

namespace specdec {

// What a method runs besides the target.
// kSelfDraft: the target drafts for itself through a sparse cache (MagicDec).
// kOtherVocabularyDraft: a draft model with its own tokenizer, which the
// method loads itself (slem, tli).
enum class MethodModels : std::uint8_t {
  kTargetOnly,
  kDraftModel,
  kLyannaHead,
  kEagleHead,
  kSelfDraft,
  kSpireDraft,
  kOtherVocabularyDraft
};
inline const char* describe(MethodModels m) {
  switch (m) {
    case MethodModels::kTargetOnly: return "target only";
    case MethodModels::kDraftModel: return "target + draft model";
    case MethodModels::kLyannaHead: return "target + Lyanna head";
    case MethodModels::kEagleHead: return "target + EAGLE head";
    case MethodModels::kSelfDraft: return "target, drafting for itself (sparse KV)";
    case MethodModels::kSpireDraft: return "target + SPIRe draft";
    case MethodModels::kOtherVocabularyDraft:
      return "target + a draft model with another vocabulary";
  }
  return "?";
}

template <class M>
struct MethodContext;

// What a backend gives the recipes besides its models; each is optional.
template <class M>
struct MethodHooks {
  // Loads a model from a checkpoint directory (SV's companion). Without it a
  // method that needs one refuses with a sentence.
  std::function<std::unique_ptr<M>(const std::filesystem::path&)> load_model;
  // Reads a tokenizer file as a TextVocabulary (the cross-vocabulary methods
  // slem and tli read the target's and the draft's). Without it those methods
  // refuse with a sentence.
  std::function<TextVocabulary(const std::filesystem::path&)> load_vocabulary;
  // Makes a model a method loaded (SV's companion, slem's and tli's draft)
  // run as the target does: the torch backend gives it the target's
  // inference dtype. Optional.
  std::function<void(M& loaded, const M& target)> match_target;
  // Runs first on every thread a method starts for its models (DuoDecoding's
  // target and draft threads), with the cores that thread has: where a
  // backend sets its per-thread thread count.
  std::function<void(int threads)> thread_setup;
  // Parameters of the backend's own that the methods drafting with a draft
  // model take (the torch backend's hot=H), and, once per method built, what
  // wraps every call into its engine given them: e.g. installing a setting
  // on the shared draft model while this method decodes. An empty result
  // wraps nothing.
  std::vector<MethodParam> draft_params;
  std::function<std::function<void(const std::function<void()>&)>(const MethodContext<M>&)> around_draft;
  // DuoDecoding with its draft on the host cores (duo:host_draft=DIR, the
  // paper's GPU target + CPU draft, arXiv 2503.00784 §3.1): loads DIR as the
  // backend's host model and returns methods::duo_decoder over the target
  // and it. Without it duo:host_draft= is refused with a sentence.
  std::function<AnyDecoder(const MethodContext<M>&, const std::filesystem::path&)> host_draft_duo;
};

// What a method's recipe is handed.
// `sampling` is what the method is set up for: rule=auto's choice, SV's
// acceptance profile. Each request still samples with its own
// (GenerationOptions::sampling): its target and draft rows follow it, and a
// greedy-only rule refuses a sampled request.
template <class M>
struct MethodContext {
  const MethodConfig& config;
  M& target;
  M* draft;                   // non-null for kDraftModel methods
  const SamplingParams& sampling;
  std::filesystem::path dir;  // where heads, the companion and SV's profiles live by default
  const MethodHooks<M>& hooks;
};

template <class M>
struct MethodInfo {
  std::string name;
  std::string summary;              // one line
  std::string papers;               // arXiv ids the method implements
  MethodModels models = MethodModels::kTargetOnly;
  bool chain_only = false;          // drafts chains only (rule=block fits)
  std::vector<MethodParam> params;  // with rule= for every speculative method
  std::function<AnyDecoder(const MethodContext<M>&)> make;
  bool one_hot_drafts = false;  // a draft-model method whose drafts are guesses, not draws (slem)
};

template <Model M>
class MethodRegistry {
 public:
  explicit MethodRegistry(MethodHooks<M> hooks = {}) : hooks_(std::move(hooks)) {}

  // Adds a method; its name must be new.
  void add(MethodInfo<M> info) {
    if (info.name.empty() || info.name.find(':') != std::string::npos || !info.make)
      throw InvalidArgumentError(fmt::format("MethodRegistry::add: '{}' needs a name without ':' and a make", info.name));
    for (const auto& m : methods_)
      if (m.name == info.name)
        throw InvalidArgumentError(fmt::format("MethodRegistry::add: a method '{}' is registered already", info.name));
    methods_.push_back(std::move(info));
  }

  // Every method, in the order added (the listing order).
  const std::deque<MethodInfo<M>>& methods() const { return methods_; }

  // The method called `name`; InvalidArgumentError listing the names otherwise.
  const MethodInfo<M>& find(std::string_view name) const {
    std::string names;
    for (const auto& m : methods_) {
      if (m.name == name) return m;
      names += (names.empty() ? "" : ", ") + m.name;
    }
    throw InvalidArgumentError(fmt::format("unknown method '{}' ({})", name, names));
  }

  // Reads "name[:key=value]..." against the method's parameters.
  MethodConfig parse(std::string_view spec) const {
    return MethodConfig::parse(spec, find(spec.substr(0, spec.find(':'))).params);
  }

  // The acceptance rule `config` verifies with at `sampling`, as people read it.
  std::string describe_rule(const MethodConfig& config, const SamplingParams& sampling) const {
    const auto& info = find(config.name);
    const bool has_rule = std::any_of(info.params.begin(), info.params.end(), [](const auto& p) { return p.key == "rule"; });
    if (!has_rule) return "no acceptance rule";
    return methods::describe(methods::rule_kind(
        config, sampling,
        methods::RuleFit{info.chain_only,
                         !info.one_hot_drafts && (info.models == MethodModels::kDraftModel ||
                                                  info.models == MethodModels::kSelfDraft ||
                                                  info.models == MethodModels::kOtherVocabularyDraft)}));
  }

  // Builds the method on `target` (and `draft` for the draft-model methods),
  // which it borrows: they must outlive it. Heads, SV's companion and its
  // profiles are read from `dir` unless the spec names them.
  AnyDecoder make(const MethodConfig& config, M& target, M* draft, const SamplingParams& sampling,
                  const std::filesystem::path& dir = "models") const {
    sampling.validate();
    const auto& info = find(config.name);
    if (info.models == MethodModels::kDraftModel && draft == nullptr)
      throw InvalidArgumentError(fmt::format("method {} needs a draft model", config.name));
    if (draft != nullptr && draft->vocab_size() != target.vocab_size())
      throw ShapeError(fmt::format("the draft model's vocabulary ({}) differs from the target's ({})",
                                   draft->vocab_size(), target.vocab_size()));
    return info.make(MethodContext<M>{config, target, draft, sampling, dir, hooks_});
  }
  AnyDecoder make(std::string_view spec, M& target, M* draft, const SamplingParams& sampling,
                  const std::filesystem::path& dir = "models") const {
    return make(parse(spec), target, draft, sampling, dir);
  }

  const MethodHooks<M>& hooks() const { return hooks_; }

 private:
  std::deque<MethodInfo<M>> methods_;  // a deque: add() keeps references to earlier ones valid
  MethodHooks<M> hooks_;
};

}  // namespace specdec
