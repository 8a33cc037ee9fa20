// Every decoding method of the library on the reference Llama model, chosen
// at run time by a spec "name[:key=value]..." (the CLI's `generate`, `bench`
// and `methods`): the registry over any Model (methods/method_registry.hpp,
// methods/standard_methods.hpp) instantiated for LlamaModel, with what this
// backend adds:
//   lyanna, eagle   their feature heads (DraftHead), from head=DIR or
//                   <dir>/lyanna, <dir>/eagle
//   hot=H           the drafter's LM head over the H most frequent tokens
//                   (FR-Spec; hot_lm_head.hpp) for the methods drafting with a
//                   draft model or a head
//   sv's companion  loaded with LlamaModel::load
//   duo's threads   each side's ATen and forward thread count
//
// Every speculative method takes rule= (methods/method_rules.hpp). Each
// request samples with its GenerationOptions::sampling. A sampled request
// drafts chains by sampling the draft warped exactly like the target and
// trees with deterministic top-k children; a greedy one ranks draft
// candidates at temperature 1 and drafts top-1 chains (draft_sampling_for,
// ChainPick::kByRequest).
#pragma once

#include <deque>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/sampling_params.hpp"
#include "specdec/engine/any_decoder.hpp"
#include "specdec/methods/method_registry.hpp"
#include "specdec/select/acceptance_table.hpp"
#include "specdec/torch/llama_model.hpp"

namespace specdec::torch_backend {

using specdec::describe;
using specdec::MethodConfig;
using specdec::MethodModels;
using specdec::MethodParam;
using specdec::ParamType;
using MethodInfo = specdec::MethodInfo<LlamaModel>;
using MethodContext = specdec::MethodContext<LlamaModel>;

// The registry: the standard methods, then lyanna and eagle.
const MethodRegistry<LlamaModel>& method_registry();

// Every registered method, in listing order.
const std::deque<MethodInfo>& registered_methods();
// The method called `name`; InvalidArgumentError listing the names otherwise.
const MethodInfo& find_method(std::string_view name);

// Parses "name[:key=value]..."; unknown names or keys are InvalidArgumentError
// naming them and what exists.
MethodConfig parse_method(std::string_view spec);

// The acceptance rule `config` verifies with at `sampling`, as people read it,
// with "LOSSY" when it does not keep the target's distribution.
std::string describe_rule(const MethodConfig& config, const SamplingParams& sampling);

// The default static tree of the `tree` method (12 nodes, depth 4).
std::string default_tree_shape();

// Builds the method on `target` (and `draft` for the draft-model methods).
// The decoder borrows the models: they must outlive it. Heads, SV's
// companion and profiles, and hot=H's token frequencies are read from
// `heads_dir` unless the spec names them.
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
