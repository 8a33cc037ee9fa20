// sv: Speculative Verification (Kim et al., arXiv 2509.24328): the draft
// model drafts a chain of k tokens per request, a companion model (smaller
// than the draft, distilled from the target) scores every request's chain in
// one forward, and the GoodputSelector verifies, across the batch, the
// prefixes that maximise expected tokens per second under the latency
// measured on this machine at start-up (select/goodput_selector.hpp).
//
// The companion is loaded with the backend's MethodHooks::load_model, the
// acceptance profile read from a file `specdec profile-sv` (or a host's own
// run of select/sv_profiling.hpp) wrote: this recipe links specdec::io.
#pragma once

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "specdec/io/sv_profile.hpp"
#include "specdec/methods/method_parts.hpp"
#include "specdec/select/goodput_selector.hpp"
#include "specdec/tree/chain_builder.hpp"

namespace specdec::methods {

// drafts=: top1 (deterministic chains) or sample; `who` names the caller in
// the error.
inline bool sv_sampled_drafts(const std::string& drafts, const std::string& who) {
  if (drafts == "top1") return false;
  if (drafts == "sample") return true;
  throw InvalidArgumentError(fmt::format("{}: drafts={} (top1 or sample)", who, drafts));
}

// What SV is set up with before its parts are built: the companion, the
// acceptance tables and the latency profile.
template <class M>
struct SvSetup {
  std::unique_ptr<M> companion;
  bool sampled_drafts = false;
  io::SvProfile tables;
  VerifyLatency latency;
  GoodputOptions options;
};

template <class M, class Rule>
class SvParts {
 public:
  using Timed = TimedModel<M>;
  using Drafter = ModelDrafter<Timed>;
  using Companion = ModelVerifier<Timed>;
  using Engine =
      SpeculativeEngine<Drafter, ChainBuilder, ModelVerifier<Timed>, Rule, RuntimePolicy, GoodputSelector<Companion>>;
  using Slot = RequestSlot<Engine, Drafter, RuntimePolicy>;

  SvParts(const MethodContext<M>& c, SvSetup<M> setup, Rule rule)
      : companion_model_(std::move(setup.companion)),
        target_(c.target),
        draft_(*c.draft),
        companion_timed_(*companion_model_),
        verifier_(target_),
        companion_(companion_timed_),
        policy_(c.config.flag("adapt") ? RuntimePolicy(FollowVerified(c.config.int32("k")))
                                       : RuntimePolicy(FixedLength::chain(c.config.int32("k")))),
        engine_(ChainBuilder{setup.sampled_drafts ? ChainBuilder::Pick::kSample : ChainBuilder::Pick::kTop1}, verifier_,
                std::move(rule),
                GoodputSelector<Companion>(companion_, std::move(setup.tables.joint),
                                           std::move(setup.tables.similarity), std::move(setup.latency),
                                           setup.options)) {
    engine_.set_target_clock(&target_.clock());
  }

  Engine& engine() { return engine_; }
  std::unique_ptr<Slot> slot(std::int32_t seq, const GenerationOptions& options, TokenCallback on_token) {
    return draft_model_slot<Slot>(draft_, policy_, seq, options, std::move(on_token), seq);
  }

 private:
  std::unique_ptr<M> companion_model_;
  Timed target_, draft_, companion_timed_;
  ModelVerifier<Timed> verifier_;
  Companion companion_;  // warps its rows as the drafter does, so S and A compare like with like
  RuntimePolicy policy_;  // each request starts from a copy
  Engine engine_;
};

// SV's companion, tables and latency profile for `c`.
template <class M>
SvSetup<M> sv_setup(const MethodContext<M>& c) {
  const auto k = c.config.int32("k");
  if (k < 1) throw InvalidArgumentError(fmt::format("method sv: k={} (need >= 1)", k));
  SvSetup<M> s;
  s.sampled_drafts = sv_sampled_drafts(c.config.text("drafts"), "method sv");
  if (s.sampled_drafts && c.sampling.is_greedy())
    throw InvalidArgumentError("method sv: drafts=sample needs temperature > 0 (greedy decoding drafts top-1)");
  s.options.min_verify = c.config.int32("min");
  s.options.fixed_cost = c.config.flag("fixed");
  s.options.verify_all = c.config.flag("all");
  s.options.biased_sampled_acceptance = c.config.flag("biased");
  const auto cut = c.config.text("cut");
  if (cut != "none" && cut != "after")
    throw InvalidArgumentError(fmt::format("method sv: cut={} (none or after)", cut));
  s.options.acceptance_after = cut == "after";
  if (s.options.acceptance_after && !s.sampled_drafts)
    throw InvalidArgumentError(
        "method sv: cut=after steers sampled drafts (drafts=sample); top-1 drafts are steered by S and A already");
  if (s.options.acceptance_after && s.options.biased_sampled_acceptance)
    throw InvalidArgumentError(
        "method sv: cut=after (A steers the drafts after a token) and biased=1 (A steers the token itself) "
        "exclude each other");
  const auto dir_or = [](const std::string& given, const std::filesystem::path& fallback) {
    return given.empty() ? fallback : std::filesystem::path(given);
  };
  if (!c.hooks.load_model)
    throw InvalidArgumentError("method sv: this backend cannot load its companion model (MethodHooks::load_model)");
  const auto dir = dir_or(c.config.text("companion"), c.dir / "companion");
  s.companion = c.hooks.load_model(dir);
  if (c.hooks.match_target) c.hooks.match_target(*s.companion, c.target);
  if (s.companion->vocab_size() != c.target.vocab_size())
    throw InvalidArgumentError(fmt::format("method sv: the companion in {} has vocabulary {}, the target {}",
                                           dir.string(), s.companion->vocab_size(), c.target.vocab_size()));
  if (s.companion->max_context() < c.target.max_context())
    throw InvalidArgumentError(fmt::format("method sv: the companion in {} holds {} tokens of context, the target {}",
                                           dir.string(), s.companion->max_context(), c.target.max_context()));
  if (s.options.verify_all) return s;
  const auto path = dir_or(c.config.text("table"), c.dir / "sv" / io::sv_profile_name(c.sampling, c.config.text("drafts")));
  if (!std::filesystem::exists(path))
    throw InvalidArgumentError(fmt::format(
        "method sv: no acceptance profile {} (run `specdec profile-sv` at this temperature and drafts=)", path.string()));
  s.tables = io::read_sv_profile(path);
  if (!s.tables.matches(c.sampling) || s.tables.drafts != c.config.text("drafts"))
    throw InvalidArgumentError(fmt::format(
        "method sv: {} was profiled at temperature {} top_k {} top_p {} with {} drafts, not this run's", path.string(),
        s.tables.temperature, s.tables.top_k, s.tables.top_p, s.tables.drafts));
  VerifyLatencyOptions lat;
  lat.batches.clear();
  for (std::int32_t b = 1; b <= c.config.int32("lat_batch"); b *= 2) lat.batches.push_back(b);
  lat.tokens.clear();
  for (std::int32_t m = 1; m <= k + 1; ++m) lat.tokens.push_back(m);
  lat.draft_length = k;
  lat.repeats = c.config.int32("lat_reps");
  s.latency = measure_verify_latency(c.target, *c.draft, *s.companion, lat);
  std::fprintf(stderr, "sv: latency profile (ms), target forward of b sequences x m tokens | fixed:\n");
  for (std::size_t i = 0; i < s.latency.batches().size(); ++i) {
    std::fprintf(stderr, "  b %3d:", s.latency.batches()[i]);
    for (std::size_t m = 0; m < s.latency.tokens().size(); ++m)
      std::fprintf(stderr, " %7.2f", 1e3 * s.latency.forward_seconds()[i * s.latency.tokens().size() + m]);
    std::fprintf(stderr, " | %7.2f\n", 1e3 * s.latency.fixed()[i]);
  }
  return s;
}

template <class M>
MethodInfo<M> sv_method() {
  return {"sv", "Speculative Verification: a companion model steers how much of each draft the target verifies",
          "2509.24328", MethodModels::kDraftModel, true,
          {{"k", ParamType::kInt, "5", "drafted tokens per request and round (the most verified)", true},
           {"drafts", ParamType::kText, "top1",
            "top1 (deterministic chains: S and A steer) | sample (sampled chains: S alone steers, lossless)", true},
           {"adapt", ParamType::kFlag, "0", "draft what was verified last round + 1 (at most k) instead of k: 0 or 1"},
           {"min", ParamType::kInt, "0", "drafts every request verifies at least"},
           {"fixed", ParamType::kFlag, "1",
            "round time = the step's time outside the target forward (measured, then learned) + the forward (0: the "
            "forward alone, the paper's GPU setting)"},
           {"all", ParamType::kFlag, "0", "verify every draft (standard speculative decoding plus the companion)"},
           {"biased", ParamType::kFlag, "0", "steer sampled drafts with A too, as the paper does: LOSSY"},
           {"cut", ParamType::kText, "none",
            "none | after: a sampled draft's A steers whether the drafts after it are verified (lossless)"},
           {"companion", ParamType::kText, "", "companion model directory (default: companion/ beside the target)"},
           {"table", ParamType::kText, "", "acceptance profile (default: sv/<sampling>.json beside the target)"},
           {"lat_batch", ParamType::kInt, "64", "largest batch size of the latency profile measured at start-up"},
           {"lat_reps", ParamType::kInt, "3", "repeats per latency point (the median is kept)"},
           rule_param()},
          [](const MethodContext<M>& c) {
            auto setup = sv_setup(c);
            return with_rule<true, true>(c.config, c.sampling, [&]<class Rule>(Rule rule) {
              return AnyDecoder::make<SvParts<M, Rule>>(c.config.spec(), c, std::move(setup), std::move(rule));
            });
          }};
}

}  // namespace specdec::methods
