#include "specdec/torch/methods.hpp"

#include <charconv>
#include <optional>
#include <sstream>
#include <variant>

#include <fmt/format.h>

#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/draft/eagle_head_drafter.hpp"
#include "specdec/draft/lyanna_drafter.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/draft/ngram_drafter.hpp"
#include "specdec/engine/autoregressive_decoder.hpp"
#include "specdec/engine/lyanna_decoder.hpp"
#include "specdec/engine/speculative_decoder.hpp"
#include "specdec/engine/timed_model.hpp"
#include "specdec/policy/confidence_stop.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/policy/heuristic_length.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/tree/dynamic_tree_builder.hpp"
#include "specdec/tree/sequoia.hpp"
#include "specdec/tree/static_tree_builder.hpp"
#include "specdec/torch/draft_head.hpp"
#include "specdec/verify/model_verifier.hpp"

namespace specdec::torch_backend {
namespace {

using Timed = TimedModel<LlamaModel>;

// A length policy chosen at run time.
class RuntimePolicy {
 public:
  template <class P>
  explicit RuntimePolicy(P p) : p_(std::move(p)) {}
  DraftBudget budget() {
    return std::visit([](auto& p) { return p.budget(); }, p_);
  }
  void observe(const RoundOutcome& o) {
    std::visit([&](auto& p) { p.observe(o); }, p_);
  }

 private:
  std::variant<FixedLength, HeuristicLength, ConfidenceStop> p_;
};

RuntimePolicy chain_policy(const MethodConfig& c) {
  if (c.policy == "fixed") return RuntimePolicy(FixedLength::chain(c.k));
  if (c.policy == "heuristic") return RuntimePolicy(HeuristicLength(c.k));
  if (c.policy == "confidence") return RuntimePolicy(ConfidenceStop(DraftBudget{c.k, c.k, c.k, 0.0f}, c.threshold));
  throw InvalidArgumentError(fmt::format("method {}: unknown policy '{}' (fixed, heuristic, confidence)", c.name,
                                         c.policy));
}

// A tree method's budget: the builder's own parameters decide the tree.
RuntimePolicy tree_policy(std::int32_t depth, std::int32_t nodes) {
  return RuntimePolicy(FixedLength(DraftBudget{depth, nodes, nodes, 0.0f}));
}

struct Autoregressive {
  Timed target;
  AutoregressiveDecoder<Timed> decoder;
  Autoregressive(LlamaModel& t, const SamplingParams& s) : target(t), decoder(target, s) {
    decoder.set_model_clock(&target.clock());
  }
  GenerationResult generate(std::span<const TokenId> p, const GenerationOptions& o, const TokenCallback& cb) {
    return decoder.generate(p, o, cb);
  }
};

template <class Builder, class Rule>
struct WithDraftModel {
  Timed target, draft;
  ModelVerifier<Timed> verifier;
  ModelDrafter<Timed> drafter;
  SpeculativeDecoder<ModelDrafter<Timed>, Builder, ModelVerifier<Timed>, Rule, RuntimePolicy> decoder;
  WithDraftModel(LlamaModel& t, LlamaModel& d, const SamplingParams& target_sampling,
                 const SamplingParams& draft_sampling, Builder builder, RuntimePolicy policy)
      : target(t),
        draft(d),
        verifier(target, target_sampling),
        drafter(draft, 0, draft_sampling),
        decoder(drafter, std::move(builder), verifier, Rule{}, std::move(policy)) {
    decoder.set_model_clocks(&target.clock(), &draft.clock());
  }
  GenerationResult generate(std::span<const TokenId> p, const GenerationOptions& o, const TokenCallback& cb) {
    return decoder.generate(p, o, cb);
  }
};

template <class Rule>
struct WithNgram {
  Timed target;
  ModelVerifier<Timed> verifier;
  NgramDrafter drafter;
  SpeculativeDecoder<NgramDrafter, ChainBuilder, ModelVerifier<Timed>, Rule, RuntimePolicy> decoder;
  WithNgram(LlamaModel& t, const SamplingParams& s, std::int32_t min_n, std::int32_t max_n, RuntimePolicy policy)
      : target(t),
        verifier(target, s),
        drafter(t.vocab_size(), min_n, max_n),
        decoder(drafter, ChainBuilder{ChainBuilder::Pick::kTop1}, verifier, Rule{}, std::move(policy)) {
    decoder.set_model_clocks(&target.clock(), nullptr);
  }
  GenerationResult generate(std::span<const TokenId> p, const GenerationOptions& o, const TokenCallback& cb) {
    return decoder.generate(p, o, cb);
  }
};

// Generates with a feature-head method and records the head's share: its
// layer and LM head time (the draft model time of such a method) and the
// commits' layer time.
template <class Decoder, class Drafter>
GenerationResult generate_with_head(Decoder& decoder, DraftHead& head, const Drafter& drafter,
                                    std::span<const TokenId> p, const GenerationOptions& o, const TokenCallback& cb) {
  head.reset_timers();
  const double commit0 = drafter.commit_seconds();
  auto r = decoder.generate(p, o, cb);
  r.stats.draft_layer_seconds = head.layer_seconds();
  r.stats.draft_head_seconds = head.head_seconds();
  r.stats.draft_model_seconds = head.layer_seconds() + head.head_seconds();
  r.stats.draft_commit_seconds = drafter.commit_seconds() - commit0;
  return r;
}

// Lyanna through the one round engine; Carry is LyannaResampling, or
// NoCarryOver without re-sampling.
template <class Rule, class Carry>
struct WithLyanna {
  Timed target;
  DraftHead head;
  ModelVerifier<Timed> verifier;
  LyannaDrafter<DraftHead> drafter;
  SpeculativeDecoder<LyannaDrafter<DraftHead>, TokenInfoTreeBuilder, ModelVerifier<Timed>, Rule, FixedLength,
                     SelectAll, Carry>
      decoder;
  WithLyanna(LlamaModel& t, const SamplingParams& s, DraftHead h, const LyannaOptions& o, Carry carry)
      : target(t),
        head(std::move(h)),
        verifier(target, s),
        drafter(head),
        decoder(drafter, TokenInfoTreeBuilder(o.branch, o.verify_budget), verifier, Rule{}, o.policy(), 0,
                SelectAll{}, std::move(carry)) {
    decoder.set_model_clocks(&target.clock(), nullptr);
  }
  GenerationResult generate(std::span<const TokenId> p, const GenerationOptions& o, const TokenCallback& cb) {
    return generate_with_head(decoder, head, drafter, p, o, cb);
  }
};

template <class Rule>
struct WithEagleHead {
  Timed target;
  DraftHead head;
  ModelVerifier<Timed> verifier;
  EagleHeadDrafter<DraftHead> drafter;
  SpeculativeDecoder<EagleHeadDrafter<DraftHead>, DynamicTreeBuilder, ModelVerifier<Timed>, Rule, RuntimePolicy> decoder;
  WithEagleHead(LlamaModel& t, const SamplingParams& s, const SamplingParams& draft_sampling, DraftHead h,
                DynamicTreeBuilder builder, RuntimePolicy policy)
      : target(t),
        head(std::move(h)),
        verifier(target, s),
        drafter(head, draft_sampling),
        decoder(drafter, std::move(builder), verifier, Rule{}, std::move(policy)) {
    decoder.set_model_clocks(&target.clock(), nullptr);
  }
  GenerationResult generate(std::span<const TokenId> p, const GenerationOptions& o, const TokenCallback& cb) {
    return generate_with_head(decoder, head, drafter, p, o, cb);
  }
};

DraftHead load_head(const MethodConfig& c, const LlamaModel& target, const std::filesystem::path& heads_dir,
                    HeadKind kind) {
  const auto dir = c.head.empty() ? heads_dir / c.name : std::filesystem::path(c.head);
  auto head = DraftHead::load(dir, target);
  if (head.config().kind != kind)
    throw InvalidArgumentError(fmt::format("method {}: {} holds an {}", c.name, dir.string(), head.config().describe()));
  return head;
}

template <class Rule>
AnyDecoder assemble(const MethodConfig& c, LlamaModel& target, LlamaModel* draft, const SamplingParams& sampling,
                    const std::filesystem::path& heads_dir) {
  const std::string spec = c.spec();
  if (c.name == "ngram")
    return AnyDecoder::make<WithNgram<Rule>>(spec, target, sampling, c.ngram_min, c.ngram_max, chain_policy(c));
  // Greedy decoding ranks draft candidates at temperature 1; sampling warps
  // the draft exactly like the target (the lossless rules compare the two).
  const bool greedy = sampling.is_greedy();
  SamplingParams draft_sampling = sampling;
  if (greedy) draft_sampling = SamplingParams{1.0f, 0, 1.0f, sampling.seed};
  if (c.name == "lyanna") {
    LyannaOptions o;
    o.depth = c.depth;
    o.branch = c.k;
    o.verify_budget = c.budget;
    o.resample = c.resample;
    o.fusion = c.fusion;
    o.resample_threshold = c.resample_threshold;
    o.resample_budget = c.resample_budget;
    o.validate();
    auto head = load_head(c, target, heads_dir, HeadKind::kLyanna);
    if (!o.resample)
      return AnyDecoder::make<WithLyanna<Rule, NoCarryOver>>(spec, target, sampling, std::move(head), o, NoCarryOver{});
    return AnyDecoder::make<WithLyanna<Rule, LyannaResampling>>(spec, target, sampling, std::move(head), o,
                                                                o.resampling());
  }
  if (c.name == "eagle")
    return AnyDecoder::make<WithEagleHead<Rule>>(spec, target, sampling, draft_sampling,
                                                 load_head(c, target, heads_dir, HeadKind::kEagle),
                                                 DynamicTreeBuilder{c.top_k, c.depth, c.total},
                                                 tree_policy(c.depth, c.total));
  if (draft == nullptr)
    throw InvalidArgumentError(fmt::format("method {} needs a draft model (--draft)", c.name));
  if (c.name == "chain") {
    const auto pick = greedy ? ChainBuilder::Pick::kTop1 : ChainBuilder::Pick::kSample;
    return AnyDecoder::make<WithDraftModel<ChainBuilder, Rule>>(spec, target, *draft, sampling, draft_sampling,
                                                                ChainBuilder{pick}, chain_policy(c));
  }
  if (c.name == "tree") {
    auto shape = parse_tree_shape(c.shape.empty() ? default_tree_shape() : c.shape);
    const auto depth = shape.max_depth(), nodes = shape.size();
    return AnyDecoder::make<WithDraftModel<StaticTreeBuilder, Rule>>(
        spec, target, *draft, sampling, draft_sampling, StaticTreeBuilder{std::move(shape)}, tree_policy(depth, nodes));
  }
  if (c.name == "dynamic")
    return AnyDecoder::make<WithDraftModel<DynamicTreeBuilder, Rule>>(
        spec, target, *draft, sampling, draft_sampling, DynamicTreeBuilder{c.top_k, c.depth, c.total},
        tree_policy(c.depth, c.total));
  if (c.name == "sequoia") {
    if (c.acceptance.empty())
      throw InvalidArgumentError("method sequoia needs p=<positional acceptance vector> (specdec sequoia measures it)");
    auto shape = sequoia_shape(c.acceptance, c.total, c.depth);
    const auto depth = shape.max_depth(), nodes = shape.size();
    return AnyDecoder::make<WithDraftModel<StaticTreeBuilder, Rule>>(
        spec, target, *draft, sampling, draft_sampling, StaticTreeBuilder{std::move(shape)}, tree_policy(depth, nodes));
  }
  throw InvalidArgumentError(fmt::format(
      "unknown method '{}' (autoregressive, chain, tree, dynamic, sequoia, ngram, lyanna, eagle)", c.name));
}

}  // namespace

std::string default_tree_shape() {
  // Wide at depth 1, where a small draft is least sure, narrowing with depth
  // (the shape Sequoia's DP gives for acceptance vectors like ours).
  return "0;1;2;3;0.0;0.1;1.0;0.0.0;0.0.1;0.1.0;0.0.0.0;0.0.0.0.0";
}

std::string MethodConfig::spec() const {
  if (name == "chain" || name == "ngram") {
    std::string s = fmt::format("{}:k={}", name, k);
    if (name == "ngram") s += fmt::format(":min={}:max={}", ngram_min, ngram_max);
    if (policy != "fixed") s += fmt::format(":policy={}", policy);
    if (policy == "confidence") s += fmt::format(":threshold={}", threshold);
    return s;
  }
  if (name == "tree") return shape.empty() ? "tree" : "tree:shape=" + shape;
  if (name == "dynamic") return fmt::format("dynamic:top_k={}:depth={}:total={}", top_k, depth, total);
  const std::string head_key = head.empty() ? "" : ":head=" + head;
  if (name == "eagle") return fmt::format("eagle:top_k={}:depth={}:total={}{}", top_k, depth, total, head_key);
  if (name == "lyanna")
    return fmt::format("lyanna:k={}:depth={}:budget={}:resample={}:fusion={}:r={}:rbudget={}{}", k, depth, budget,
                       int{resample}, int{fusion}, resample_threshold, resample_budget, head_key);
  if (name == "sequoia") {
    std::string p;
    for (const auto v : acceptance) p += fmt::format("{}{:.3g}", p.empty() ? "" : ",", v);
    return fmt::format("sequoia:p={}:total={}:depth={}", p, total, depth);
  }
  return name;
}

namespace {

template <class T>
T parse_number(std::string_view spec, std::string_view key, std::string_view text) {
  T value{};
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || ptr != text.data() + text.size())
    throw InvalidArgumentError(fmt::format("method '{}': {}={} is not a number", spec, key, text));
  return value;
}

}  // namespace

MethodConfig parse_method(std::string_view spec) {
  MethodConfig c;
  std::size_t at = spec.find(':');
  c.name = std::string(spec.substr(0, at));
  if (c.name == "lyanna" || c.name == "eagle") {  // the paper's setting: depth 3, 12 verified nodes
    c.depth = 3;
    c.total = 12;
  }
  const auto flag = [&](std::string_view key, std::string_view value) {
    if (value != "0" && value != "1")
      throw InvalidArgumentError(fmt::format("method '{}': {}={} must be 0 or 1", spec, key, value));
    return value == "1";
  };
  while (at != std::string_view::npos) {
    const auto next = spec.find(':', at + 1);
    const auto item = spec.substr(at + 1, (next == std::string_view::npos ? spec.size() : next) - at - 1);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos)
      throw InvalidArgumentError(fmt::format("method '{}': '{}' is not key=value", spec, item));
    const auto key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "k") c.k = parse_number<std::int32_t>(spec, key, value);
    else if (key == "policy") c.policy = std::string(value);
    else if (key == "threshold") c.threshold = parse_number<float>(spec, key, value);
    else if (key == "shape") c.shape = std::string(value);
    else if (key == "top_k") c.top_k = parse_number<std::int32_t>(spec, key, value);
    else if (key == "depth") c.depth = parse_number<std::int32_t>(spec, key, value);
    else if (key == "total") c.total = parse_number<std::int32_t>(spec, key, value);
    else if (key == "min") c.ngram_min = parse_number<std::int32_t>(spec, key, value);
    else if (key == "max") c.ngram_max = parse_number<std::int32_t>(spec, key, value);
    else if (key == "budget") c.budget = parse_number<std::int32_t>(spec, key, value);
    else if (key == "resample") c.resample = flag(key, value);
    else if (key == "fusion") c.fusion = flag(key, value);
    else if (key == "r") c.resample_threshold = parse_number<std::int32_t>(spec, key, value);
    else if (key == "rbudget") c.resample_budget = parse_number<std::int32_t>(spec, key, value);
    else if (key == "head") c.head = std::string(value);
    else if (key == "p") {
      c.acceptance.clear();
      std::size_t p = 0;
      while (p <= value.size()) {
        const auto q = std::min(value.find(',', p), value.size());
        c.acceptance.push_back(parse_number<double>(spec, key, value.substr(p, q - p)));
        p = q + 1;
      }
    } else {
      throw InvalidArgumentError(fmt::format("method '{}': unknown key '{}'", spec, key));
    }
    at = next;
  }
  return c;
}

AnyDecoder make_method(const MethodConfig& config, LlamaModel& target, LlamaModel* draft,
                       const SamplingParams& sampling, const std::filesystem::path& heads_dir) {
  sampling.validate();
  if (draft != nullptr && draft->vocab_size() != target.vocab_size())
    throw ShapeError(fmt::format("the draft model's vocabulary ({}) differs from the target's ({})",
                                 draft->vocab_size(), target.vocab_size()));
  if (config.name == "autoregressive")
    return AnyDecoder::make<Autoregressive>("autoregressive", target, sampling);
  if (sampling.is_greedy()) return assemble<GreedyAcceptance>(config, target, draft, sampling, heads_dir);
  return assemble<RecursiveRejectionSampling>(config, target, draft, sampling, heads_dir);
}

}  // namespace specdec::torch_backend
