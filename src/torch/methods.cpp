// The method registry of the libtorch backend (torch/methods.hpp): the
// standard recipes over LlamaModel, the feature-head methods over DraftHead,
// and this backend's hooks.
#include "specdec/torch/methods.hpp"

#include <memory>

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/cpu/llama_model.hpp"
#include "specdec/cpu/row_linear.hpp"
#include "specdec/cpu/threads.hpp"
#include "specdec/methods/duo.hpp"
#include "specdec/methods/eagle.hpp"
#include "specdec/methods/eagle3.hpp"
#include "specdec/methods/lyanna.hpp"
#include "specdec/methods/spire.hpp"
#include "specdec/methods/standard_methods.hpp"
#include "specdec/select/sv_profiling.hpp"
#include "specdec/tokenizer/text_vocabulary.hpp"
#include "specdec/torch/draft_head.hpp"
#include "specdec/torch/hot_lm_head.hpp"
#include "specdec/torch/spire_draft.hpp"

namespace specdec::torch_backend {
namespace {

MethodParam hot_param() {
  return {"hot", ParamType::kInt, "0",
          "draft over the H most frequent tokens only (FR-Spec; ranked by token_frequencies.json beside the target); 0 "
          "= the whole vocabulary"};
}

// hot=H: the drafter's LM head over the H most frequent tokens, ranked by
// <dir>/token_frequencies.json; nullptr for 0.
std::shared_ptr<const HotLmHead> hot_lm_head_for(const MethodContext& c, const at::Tensor& lm_head, DType dtype) {
  const auto h = c.config.int32("hot");
  if (h < 0) throw InvalidArgumentError(fmt::format("method {}: hot={} must be >= 0", c.config.name, h));
  if (h == 0) return nullptr;
  return std::make_shared<const HotLmHead>(lm_head, hot_vocabulary(c.dir / "token_frequencies.json", h, lm_head.size(0)),
                                           dtype);
}

// Installs a draft model's hot LM head for a scope (the draft model is
// shared by the methods of a run; each installs its own while it decodes).
class HotLmHeadScope {
 public:
  HotLmHeadScope(LlamaModel& model, std::shared_ptr<const HotLmHead> head)
      : model_(model), previous_(model.hot_lm_head()) {
    model_.set_hot_lm_head(std::move(head));
  }
  ~HotLmHeadScope() { model_.set_hot_lm_head(previous_); }
  HotLmHeadScope(const HotLmHeadScope&) = delete;
  HotLmHeadScope& operator=(const HotLmHeadScope&) = delete;

 private:
  LlamaModel& model_;
  std::shared_ptr<const HotLmHead> previous_;
};

MethodHooks<LlamaModel> hooks() {
  MethodHooks<LlamaModel> h;
  h.load_model = [](const std::filesystem::path& dir) { return std::make_unique<LlamaModel>(LlamaModel::load(dir)); };
  h.match_target = [](LlamaModel& loaded, const LlamaModel& target) {
    loaded.set_inference_dtype(target.inference_dtype());
  };
  h.load_vocabulary = [](const std::filesystem::path& path) {
    return tokenizer::text_vocabulary(Tokenizer::load(path), path.string());
  };
  // OpenMP's thread count is per thread, but ATen resets a thread's count to
  // the process-wide one on its first parallel region unless
  // at::set_num_threads set it there. (With omp_set_num_threads instead,
  // DuoDecoding's two threads ran teams of two, and every method run after it
  // in the process was 1.5-2x slower.)
  h.thread_setup = [](int threads) {
    at::set_num_threads(threads);
    cpu::set_forward_threads(threads);
  };
  // duo:host_draft=DIR: the draft on cpu::LlamaModel (the torch-free host
  // model a device target drafts with), in the target's precision.
  h.host_draft_duo = [](const MethodContext& c, const std::filesystem::path& dir) {
    auto draft = std::make_shared<cpu::LlamaModel>(
        cpu::LlamaModel::load(dir, cpu::RowLinear::runnable(c.target.inference_dtype())));
    return methods::duo_decoder(c, *draft, draft);
  };
  h.draft_params = {hot_param()};
  h.around_draft = [](const MethodContext& c) -> std::function<void(const std::function<void()>&)> {
    auto hot = hot_lm_head_for(c, c.draft->lm_head(), c.draft->inference_dtype());
    if (!hot) return {};
    return [draft = c.draft, hot](const std::function<void()>& call) {
      const HotLmHeadScope scope(*draft, hot);
      call();
    };
  };
  return h;
}

// head= or <dir>/<method name>, checked to hold a head of `kind`, in its
// target's precision, with hot=H's LM head.
DraftHead load_head(const MethodContext& c, HeadKind kind) {
  const auto& given = c.config.text("head");
  const auto dir = given.empty() ? c.dir / c.config.name : std::filesystem::path(given);
  auto head = DraftHead::load(dir, c.target);
  if (head.config().kind != kind)
    throw InvalidArgumentError(
        fmt::format("method {}: {} holds an {}", c.config.name, dir.string(), head.config().describe()));
  head.set_inference_dtype(c.target.inference_dtype());
  head.set_hot_lm_head(hot_lm_head_for(c, head.lm_head(), head.inference_dtype()));
  return head;
}

// head= or <dir>/spire, in its target's precision.
SpireDraft load_spire(const MethodContext& c) {
  const auto& given = c.config.text("head");
  auto draft = SpireDraft::load(given.empty() ? c.dir / "spire" : std::filesystem::path(given), c.target);
  draft.set_inference_dtype(c.target.inference_dtype());
  return draft;
}

}  // namespace

const MethodRegistry<LlamaModel>& method_registry() {
  static const MethodRegistry<LlamaModel> registry = [] {
    auto r = standard_methods<LlamaModel>(hooks());
    r.add(methods::lyanna_method<LlamaModel, DraftHead>(
        [](const MethodContext& c) { return load_head(c, HeadKind::kLyanna); }, r.hooks()));
    r.add(methods::eagle_method<LlamaModel, DraftHead>(
        [](const MethodContext& c) { return load_head(c, HeadKind::kEagle); }, r.hooks()));
    r.add(methods::eagle3_method<LlamaModel, DraftHead>(
        [](const MethodContext& c) { return load_head(c, HeadKind::kEagle3); }, r.hooks()));
    r.add(methods::spire_method<LlamaModel, SpireDraft>(load_spire));
    return r;
  }();
  return registry;
}

const std::deque<MethodInfo>& registered_methods() { return method_registry().methods(); }
const MethodInfo& find_method(std::string_view name) { return method_registry().find(name); }
MethodConfig parse_method(std::string_view spec) { return method_registry().parse(spec); }
std::string describe_rule(const MethodConfig& config, const SamplingParams& sampling) {
  return method_registry().describe_rule(config, sampling);
}
std::string default_tree_shape() { return methods::default_tree_shape(); }

AnyDecoder make_method(const MethodConfig& config, LlamaModel& target, LlamaModel* draft,
                       const SamplingParams& sampling, const std::filesystem::path& heads_dir) {
  return method_registry().make(config, target, draft, sampling, heads_dir);
}

std::vector<AcceptanceSample> profile_sv_samples(LlamaModel& target, LlamaModel& draft, LlamaModel& companion,
                                                 const SamplingParams& sampling,
                                                 std::span<const std::vector<TokenId>> prompts,
                                                 const SvProfileOptions& o) {
  SvProfilingOptions options;
  options.length = o.length;
  options.sampled_drafts = methods::sv_sampled_drafts(o.drafts, "profile-sv");
  options.max_new_tokens = o.max_new_tokens;
  options.batch = o.batch;
  options.sampling = sampling;
  return profile_sv(target, draft, companion, prompts, options);  // select/sv_profiling.hpp
}

}  // namespace specdec::torch_backend
