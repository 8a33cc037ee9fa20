// The method registry (torch/methods.hpp): the list of registered methods,
// spec parsing against their parameters, the acceptance-rule choice, and
// make_method.
#include "specdec/torch/methods.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "methods/parts.hpp"
#include "specdec/core/error.hpp"

namespace specdec::torch_backend {

const char* describe(MethodModels m) {
  switch (m) {
    case MethodModels::kTargetOnly: return "target only";
    case MethodModels::kDraftModel: return "target + draft model";
    case MethodModels::kLyannaHead: return "target + Lyanna head";
    case MethodModels::kEagleHead: return "target + EAGLE head";
  }
  return "?";
}

std::span<const MethodInfo> registered_methods() {
  // One line per method file; the order is the listing order.
  static const std::vector<MethodInfo> methods = {
      methods::autoregressive_method(), methods::chain_method(),  methods::tree_method(),
      methods::dynamic_method(),        methods::sequoia_method(), methods::ngram_method(),
      methods::lyanna_method(),         methods::eagle_method(),   methods::duo_method(),
      methods::sv_method(),
  };
  return methods;
}

const MethodInfo& find_method(std::string_view name) {
  std::string names;
  for (const auto& m : registered_methods()) {
    if (m.name == name) return m;
    names += (names.empty() ? "" : ", ") + m.name;
  }
  throw InvalidArgumentError(fmt::format("unknown method '{}' ({})", name, names));
}

std::string default_tree_shape() {
  // Wide at depth 1, where a small draft is least sure, narrowing with depth
  // (the shape Sequoia's DP gives for acceptance vectors like ours).
  return "0;1;2;3;0.0;0.1;1.0;0.0.0;0.0.1;0.1.0;0.0.0.0;0.0.0.0.0";
}

// ---- MethodConfig -------------------------------------------------------------

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

const std::string& MethodConfig::text(std::string_view key) const {
  for (const auto& [k, v] : values_)
    if (k == key) return v;
  throw InvalidArgumentError(fmt::format("method {} has no parameter '{}'", name, key));
}
std::int32_t MethodConfig::int32(std::string_view key) const {
  return parse_number<std::int32_t>(source_, key, text(key));
}
float MethodConfig::real(std::string_view key) const { return parse_number<float>(source_, key, text(key)); }
bool MethodConfig::flag(std::string_view key) const {
  const auto& v = text(key);
  if (v != "0" && v != "1") throw InvalidArgumentError(fmt::format("method '{}': {}={} must be 0 or 1", source_, key, v));
  return v == "1";
}
std::vector<double> MethodConfig::reals(std::string_view key) const {
  std::vector<double> out;
  const std::string_view value = text(key);
  if (value.empty()) return out;
  std::size_t p = 0;
  while (p <= value.size()) {
    const auto q = std::min(value.find(',', p), value.size());
    out.push_back(parse_number<double>(source_, key, value.substr(p, q - p)));
    p = q + 1;
  }
  return out;
}

std::string MethodConfig::spec() const {
  std::string s = name;
  const auto& info = find_method(name);
  for (std::size_t i = 0; i < values_.size(); ++i) {
    const auto& param = info.params[i];
    if (!given_[i] && !param.always_in_spec) continue;
    if (values_[i].second.empty() && !given_[i]) continue;
    if (param.type == ParamType::kReals) {  // a vector (sequoia's p), at 3 significant digits
      std::string v;
      for (const auto x : reals(param.key)) v += fmt::format("{}{:.3g}", v.empty() ? "" : ",", x);
      s += ":" + param.key + "=" + v;
      continue;
    }
    s += ":" + values_[i].first + "=" + values_[i].second;
  }
  return s;
}

MethodConfig parse_method(std::string_view spec) {
  MethodConfig c;
  c.source_ = std::string(spec);
  std::size_t at = spec.find(':');
  c.name = std::string(spec.substr(0, at));
  const auto& info = find_method(c.name);
  for (const auto& p : info.params) c.values_.emplace_back(p.key, p.default_value);
  c.given_.assign(info.params.size(), false);
  while (at != std::string_view::npos) {
    const auto next = spec.find(':', at + 1);
    const auto item = spec.substr(at + 1, (next == std::string_view::npos ? spec.size() : next) - at - 1);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos)
      throw InvalidArgumentError(fmt::format("method '{}': '{}' is not key=value", spec, item));
    const auto key = item.substr(0, eq), value = item.substr(eq + 1);
    const auto it = std::find_if(info.params.begin(), info.params.end(), [&](const auto& p) { return p.key == key; });
    if (it == info.params.end()) {
      std::string keys;
      for (const auto& p : info.params) keys += (keys.empty() ? "" : ", ") + p.key;
      throw InvalidArgumentError(fmt::format("method '{}': unknown key '{}' ({} takes: {})", spec, key, c.name,
                                             keys.empty() ? "nothing" : keys));
    }
    const auto i = static_cast<std::size_t>(it - info.params.begin());
    c.values_[i].second = std::string(value);
    c.given_[i] = true;
    at = next;
  }
  // Every value is read as its type now, so a bad one fails before any model loads.
  for (std::size_t i = 0; i < info.params.size(); ++i) {
    const auto& key = info.params[i].key;
    switch (info.params[i].type) {
      case ParamType::kInt: (void)c.int32(key); break;
      case ParamType::kReal: (void)c.real(key); break;
      case ParamType::kFlag: (void)c.flag(key); break;
      case ParamType::kReals: (void)c.reals(key); break;
      case ParamType::kText: break;
    }
  }
  return c;
}

// ---- rules ------------------------------------------------------------------

namespace methods {

MethodParam rule_param() {
  return {"rule", ParamType::kText, "auto",
          "auto (greedy at temperature 0, else rrs) | greedy | rrs (recursive rejection sampling) | speculative "
          "(chains with a draft model) | block (block verification, chains) | traversal (traversal verification) "
          "| typical (Medusa, LOSSY)"};
}

MethodParam draw_param() {
  return {"draw", ParamType::kText, "topk",
          "children per node: topk (the draft's best, deterministic) | sample (drawn without replacement, Sequoia "
          "arXiv 2402.12374 §3.2) | iid (drawn independently, with replacement: SpecInfer arXiv 2305.09781 §4.3)"};
}

ChildMode child_draw(const MethodConfig& c) {
  const auto& draw = c.text("draw");
  if (draw == "topk") return ChildMode::kDeterministic;
  if (draw == "sample") return ChildMode::kSampledWithoutReplacement;
  if (draw == "iid") return ChildMode::kSampledWithReplacement;
  throw InvalidArgumentError(fmt::format("method {}: unknown draw '{}' (topk, sample, iid)", c.name, draw));
}

RuleKind rule_kind(const MethodConfig& c, const SamplingParams& sampling, RuleFit fit) {
  const auto& rule = c.text("rule");
  if (rule == "auto") return sampling.is_greedy() ? RuleKind::kGreedy : RuleKind::kRecursiveRejection;
  if (rule == "greedy") {
    if (!sampling.is_greedy())
      throw InvalidArgumentError(fmt::format(
          "method {}: rule=greedy needs temperature 0 (at temperature {} it would not keep the target's "
          "distribution; use rule=rrs)",
          c.name, sampling.temperature));
    return RuleKind::kGreedy;
  }
  if (rule == "rrs") return RuleKind::kRecursiveRejection;
  if (rule == "typical") return RuleKind::kTypical;
  if (rule == "traversal") return RuleKind::kTraversal;
  if (rule == "block") {
    if (!fit.chains)
      throw InvalidArgumentError(fmt::format(
          "method {}: rule=block verifies chains, and this method drafts trees; use rule=traversal (block "
          "verification generalised to trees)",
          c.name));
    return RuleKind::kBlock;
  }
  if (rule == "speculative") {
    if (!fit.chains || !fit.probs)
      throw InvalidArgumentError(fmt::format(
          "method {}: rule=speculative verifies chains drafted from probabilities (a draft model's chain); use "
          "rule=rrs",
          c.name));
    return RuleKind::kSpeculative;
  }
  throw InvalidArgumentError(fmt::format(
      "method {}: unknown rule '{}' (auto, greedy, rrs, speculative, block, traversal, typical)", c.name, rule));
}

MethodParam hot_param() {
  return {"hot", ParamType::kInt, "0",
          "draft over the H most frequent tokens only (FR-Spec; ranked by token_frequencies.json beside the target); 0 "
          "= the whole vocabulary"};
}

std::shared_ptr<const HotLmHead> hot_lm_head_for(const MethodContext& c, const at::Tensor& lm_head, DType dtype) {
  const auto h = c.config.int32("hot");
  if (h < 0) throw InvalidArgumentError(fmt::format("method {}: hot={} must be >= 0", c.config.name, h));
  if (h == 0) return nullptr;
  return std::make_shared<const HotLmHead>(
      lm_head, hot_vocabulary(c.heads_dir / "token_frequencies.json", h, lm_head.size(0)), dtype);
}

DraftHead load_head(const MethodContext& c, HeadKind kind) {
  const auto& given = c.config.text("head");
  const auto dir = given.empty() ? c.heads_dir / c.config.name : std::filesystem::path(given);
  auto head = DraftHead::load(dir, c.target);
  if (head.config().kind != kind)
    throw InvalidArgumentError(
        fmt::format("method {}: {} holds an {}", c.config.name, dir.string(), head.config().describe()));
  head.set_inference_dtype(c.target.inference_dtype());  // a head runs in its target's precision
  head.set_hot_lm_head(hot_lm_head_for(c, head.lm_head(), head.inference_dtype()));
  return head;
}

}  // namespace methods

std::string describe_rule(const MethodConfig& config, const SamplingParams& sampling) {
  if (config.name == "autoregressive") return "no acceptance rule";
  const auto& info = find_method(config.name);
  const methods::RuleFit fit{info.chain_only, info.models == MethodModels::kDraftModel};
  switch (methods::rule_kind(config, sampling, fit)) {
    case methods::RuleKind::kGreedy: return "greedy acceptance, lossless";
    case methods::RuleKind::kRecursiveRejection: return "recursive rejection sampling, lossless";
    case methods::RuleKind::kSpeculative: return "speculative sampling, lossless";
    case methods::RuleKind::kBlock: return "block verification, lossless";
    case methods::RuleKind::kTraversal: return "traversal verification, lossless";
    case methods::RuleKind::kTypical: return "typical acceptance, LOSSY (not the target's distribution)";
  }
  return "?";
}

AnyDecoder make_method(const MethodConfig& config, LlamaModel& target, LlamaModel* draft,
                       const SamplingParams& sampling, const std::filesystem::path& heads_dir) {
  sampling.validate();
  const auto& info = find_method(config.name);
  if (draft != nullptr && draft->vocab_size() != target.vocab_size())
    throw ShapeError(fmt::format("the draft model's vocabulary ({}) differs from the target's ({})",
                                 draft->vocab_size(), target.vocab_size()));
  return info.make(MethodContext{config, target, draft, sampling, heads_dir});
}

}  // namespace specdec::torch_backend
