// Every decoding method of the library assembled on the reference Llama model,
// chosen at run time by a spec "name[:key=value]..." (the CLI's `generate`,
// `bench` and `methods`).
//
// The registry is open: each method registers, in its own file under
// src/torch/methods/, its name, parameters with defaults and help, the
// models it needs, the papers it implements and how to build it from the
// one round engine's components. `specdec methods` and `specdec generate
// --help` list what is registered.
//
// Every speculative method takes `rule=`: the acceptance rule.
//   auto          greedy at temperature 0, recursive rejection sampling otherwise
//   greedy        the target's argmax (temperature 0 only)
//   rrs           recursive rejection sampling (SpecInfer), lossless at any temperature
//   speculative   speculative sampling (Leviathan et al.), lossless; chain methods only
//   typical       Medusa's typical acceptance: LOSSY, labelled so in every output
// Each request samples with its GenerationOptions::sampling. A sampled
// request drafts chains by sampling the draft warped exactly like the target
// and trees with deterministic top-k children; a greedy one ranks draft
// candidates at temperature 1 and drafts top-1 chains
// (draft_sampling_for, ChainPick::kByRequest).
#pragma once

#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/core/sampling_params.hpp"
#include "specdec/engine/any_decoder.hpp"
#include "specdec/select/acceptance_table.hpp"
#include "specdec/torch/llama_model.hpp"

namespace specdec::torch_backend {

// What a method runs besides the target.
enum class MethodModels : std::uint8_t { kTargetOnly, kDraftModel, kLyannaHead, kEagleHead };
const char* describe(MethodModels m);

// How a parameter's text is read (and checked when the spec is parsed).
enum class ParamType : std::uint8_t { kText, kInt, kReal, kFlag, kReals };

struct MethodParam {
  std::string key;
  ParamType type = ParamType::kText;
  std::string default_value;
  std::string help;
  bool always_in_spec = false;  // shown in spec() even at its default (the knobs a table compares)
};

// A method spec after parsing: the name and every parameter's value (the
// defaults filled in), checked against the registered parameters.
class MethodConfig {
 public:
  std::string name;

  // The value of `key` (as given or its default); typed getters throw
  // InvalidArgumentError naming the spec when the text does not parse.
  const std::string& text(std::string_view key) const;
  std::int32_t int32(std::string_view key) const;
  float real(std::string_view key) const;
  bool flag(std::string_view key) const;
  std::vector<double> reals(std::string_view key) const;  // "0.6,0.2,0.1"

  // Canonical spec: the name, the always-shown keys and every key set away
  // from its default, in registration order. It round-trips through
  // parse_method().
  std::string spec() const;

 private:
  friend MethodConfig parse_method(std::string_view spec);
  std::vector<std::pair<std::string, std::string>> values_;  // registration order
  std::vector<bool> given_;                                   // set in the spec, not defaulted
  std::string source_;                                        // the spec as given, for messages
};

// What a method's factory is handed.
// `sampling` is what the method is set up for: rule=auto's choice, SV's
// acceptance profile. Each request still samples with its own
// (GenerationOptions::sampling): its target and draft rows follow it, and a
// greedy-only rule refuses a sampled request.
struct MethodContext {
  const MethodConfig& config;
  LlamaModel& target;
  LlamaModel* draft;                  // non-null for kDraftModel methods
  const SamplingParams& sampling;
  std::filesystem::path heads_dir;    // where lyanna/ and eagle/ heads live by default
};

struct MethodInfo {
  std::string name;
  std::string summary;                // one line
  std::string papers;                 // arXiv ids the method implements
  MethodModels models = MethodModels::kTargetOnly;
  bool chain_only = false;            // builds chains only (so rule=speculative fits)
  std::vector<MethodParam> params;    // rule= is added to every speculative method
  std::function<AnyDecoder(const MethodContext&)> make;
};

// Every registered method, in listing order.
std::span<const MethodInfo> registered_methods();
// The method called `name`; InvalidArgumentError listing the names otherwise.
const MethodInfo& find_method(std::string_view name);

// Parses "name[:key=value]..."; unknown names or keys are InvalidArgumentError
// naming them and what exists.
MethodConfig parse_method(std::string_view spec);

// The acceptance rule `config` verifies with at `sampling`, as people read it,
// with "(lossy)" when it does not keep the target's distribution.
std::string describe_rule(const MethodConfig& config, const SamplingParams& sampling);

// The default static tree of the `tree` method (12 nodes, depth 4).
std::string default_tree_shape();

// Builds the method on `target` (and `draft` for the draft-model methods).
// Sequences are opened and closed by the decoder. The decoder borrows the
// models: they must outlive it. The feature-head methods load their head
// from head=DIR, or from `heads_dir`/lyanna (eagle).
AnyDecoder make_method(const MethodConfig& config, LlamaModel& target, LlamaModel* draft,
                       const SamplingParams& sampling, const std::filesystem::path& heads_dir = "models");

// Speculative Verification's profiling run (`specdec profile-sv`; arXiv
// 2509.24328, §4.2) on the libtorch models: select/sv_profiling.hpp's
// profile_sv, which a host runs on its own Model.
struct SvProfileOptions {
  std::int32_t length = 5;
  std::string drafts = "top1";  // top1 | sample
  std::int64_t max_new_tokens = 32;
  std::size_t batch = 8;
};
std::vector<AcceptanceSample> profile_sv_samples(LlamaModel& target, LlamaModel& draft, LlamaModel& companion,
                                                 const SamplingParams& sampling, std::span<const std::vector<TokenId>> prompts,
                                                 const SvProfileOptions& options);

}  // namespace specdec::torch_backend
