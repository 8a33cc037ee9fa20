// sv: Speculative Verification (Kim et al., arXiv 2509.24328): the draft
// model drafts a chain of k tokens per request, a companion model (smaller
// than the draft, distilled from the target) scores every request's chain in
// one forward, and the GoodputSelector verifies, across the batch, the
// prefixes that maximise expected tokens per second under the latency
// measured on this machine at start-up (select/goodput_selector.hpp).
//
// `specdec profile-sv` runs select/sv_profiling.hpp on these models.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <vector>

#include "specdec/io/sv_profile.hpp"
#include "specdec/select/goodput_selector.hpp"
#include "specdec/select/sv_profiling.hpp"
#include "specdec/tree/chain_builder.hpp"

#include "parts.hpp"

namespace specdec::torch_backend {
namespace methods {
namespace {

using Companion = ModelVerifier<Timed>;
using Selector = GoodputSelector<Companion>;

bool sampled_drafts(const std::string& drafts, const std::string& who) {
  if (drafts == "top1") return false;
  if (drafts == "sample") return true;
  throw InvalidArgumentError(fmt::format("{}: drafts={} (top1 or sample)", who, drafts));
}

// The models and the engine of an SV run.
template <class Rule>
struct SvParts {
  using Engine = SpeculativeEngine<ModelDrafter<Timed>, ChainBuilder, ModelVerifier<Timed>, Rule, RuntimePolicy, Selector>;
  Timed target, draft, companion_model;
  ModelVerifier<Timed> verifier;
  Companion companion;  // warps its rows as the drafter does (GoodputSelector), so S and A compare like with like
  RuntimePolicy policy;  // each request starts from a copy
  Engine engine;

  SvParts(LlamaModel& t, LlamaModel& d, LlamaModel& c, std::int32_t k, bool adapt, bool sample, Rule rule,
          io::SvProfile tables, VerifyLatency latency, GoodputOptions options)
      : target(t),
        draft(d),
        companion_model(c),
        verifier(target),
        companion(companion_model),
        policy(adapt ? RuntimePolicy(FollowVerified(k)) : RuntimePolicy(FixedLength::chain(k))),
        engine(ChainBuilder{sample ? ChainBuilder::Pick::kSample : ChainBuilder::Pick::kTop1}, verifier,
               std::move(rule),
               Selector(companion, std::move(tables.joint), std::move(tables.similarity), std::move(latency),
                        options)) {
    engine.set_target_clock(&target.clock());
  }

  GenerationResult generate(std::span<const TokenId> p, const GenerationOptions& o, const TokenCallback& cb) {
    ModelDrafter<Timed> drafter(draft, 0);
    RuntimePolicy request_policy = policy;
    typename Engine::Request request(0, drafter, request_policy, o, cb);
    request.set_draft_clock(&draft.clock());
    engine.begin(request, p);
    while (!request.done()) engine.step(request);
    return request.take_result();
  }
  BatchRun generate_batch(std::span<const std::vector<TokenId>> p, std::span<const GenerationOptions> o,
                          std::size_t max_batch) {
    return run_batch<ModelDrafter<Timed>>(engine, p, o, max_batch, policy, &draft.clock(), [&](std::int32_t seq) {
      return std::tuple(std::ref(draft), seq);
    });
  }
};

template <class Rule>
struct WithSv {
  LlamaModel companion_model;
  SvParts<Rule> parts;
  WithSv(const MethodContext& c, LlamaModel companion, bool sample, Rule rule, io::SvProfile tables,
         VerifyLatency latency, GoodputOptions options)
      : companion_model(std::move(companion)),
        parts(c.target, *c.draft, companion_model, c.config.int32("k"),
              c.config.flag("adapt"), sample, std::move(rule), std::move(tables), std::move(latency), options) {}
  GenerationResult generate(std::span<const TokenId> p, const GenerationOptions& o, const TokenCallback& cb) {
    return parts.generate(p, o, cb);
  }
  void set_round_view_observer(std::function<void(const RoundView&)> f) {
    parts.engine.set_round_view_observer(std::move(f));
  }
  BatchRun generate_batch(std::span<const std::vector<TokenId>> p, std::span<const GenerationOptions> o,
                          std::size_t max_batch) {
    return parts.generate_batch(p, o, max_batch);
  }
};

std::filesystem::path dir_or(const std::string& given, const std::filesystem::path& fallback) {
  return given.empty() ? fallback : std::filesystem::path(given);
}

LlamaModel load_companion(const std::filesystem::path& dir, const LlamaModel& target) {
  auto m = LlamaModel::load(dir);
  if (m.vocab_size() != target.vocab_size())
    throw InvalidArgumentError(fmt::format("method sv: the companion in {} has vocabulary {}, the target {}",
                                           dir.string(), m.vocab_size(), target.vocab_size()));
  if (m.max_context() < target.max_context())
    throw InvalidArgumentError(fmt::format("method sv: the companion in {} holds {} tokens of context, the target {}",
                                           dir.string(), m.max_context(), target.max_context()));
  return m;
}

}  // namespace

MethodInfo sv_method() {
  return {"sv", "Speculative Verification: a companion model steers how much of each draft the target verifies",
          "2509.24328", MethodModels::kDraftModel, true,
          {{"k", ParamType::kInt, "5", "drafted tokens per request and round (the most verified)", true},
           {"drafts", ParamType::kText, "top1",
            "top1 (deterministic chains: S and A steer) | sample (sampled chains: S alone steers, lossless)", true},
           {"adapt", ParamType::kFlag, "0",
            "draft what was verified last round + 1 (at most k) instead of k: 0 or 1"},
           {"min", ParamType::kInt, "0", "drafts every request verifies at least"},
           {"fixed", ParamType::kFlag, "1",
            "round time = the step's time outside the target forward (measured, then learned) + the forward (0: the "
            "forward alone, the paper's GPU setting)"},
           {"all", ParamType::kFlag, "0", "verify every draft (standard speculative decoding plus the companion)"},
           {"biased", ParamType::kFlag, "0", "steer sampled drafts with A too, as the paper does: LOSSY"},
           {"companion", ParamType::kText, "", "companion model directory (default: companion/ beside the target)"},
           {"table", ParamType::kText, "", "acceptance profile (default: sv/<sampling>.json beside the target)"},
           {"lat_batch", ParamType::kInt, "64", "largest batch size of the latency profile measured at start-up"},
           {"lat_reps", ParamType::kInt, "3", "repeats per latency point (the median is kept)"},
           rule_param()},
          [](const MethodContext& c) {
            if (c.draft == nullptr) throw InvalidArgumentError("method sv needs a draft model (--draft)");
            const auto k = c.config.int32("k");
            if (k < 1) throw InvalidArgumentError(fmt::format("method sv: k={} (need >= 1)", k));
            const bool sample = sampled_drafts(c.config.text("drafts"), "method sv");
            if (sample && c.sampling.is_greedy())
              throw InvalidArgumentError("method sv: drafts=sample needs temperature > 0 (greedy decoding drafts top-1)");
            GoodputOptions options;
            options.min_verify = c.config.int32("min");
            options.fixed_cost = c.config.flag("fixed");
            options.verify_all = c.config.flag("all");
            options.biased_sampled_acceptance = c.config.flag("biased");
            auto companion = load_companion(dir_or(c.config.text("companion"), c.heads_dir / "companion"), c.target);
            io::SvProfile tables;
            VerifyLatency latency;
            if (!options.verify_all) {
              const auto path = dir_or(c.config.text("table"),
                                       c.heads_dir / "sv" / io::sv_profile_name(c.sampling, c.config.text("drafts")));
              if (!std::filesystem::exists(path))
                throw InvalidArgumentError(fmt::format(
                    "method sv: no acceptance profile {} (run `specdec profile-sv` at this temperature and drafts=)",
                    path.string()));
              tables = io::read_sv_profile(path);
              if (!tables.matches(c.sampling) || tables.drafts != c.config.text("drafts"))
                throw InvalidArgumentError(fmt::format(
                    "method sv: {} was profiled at temperature {} top_k {} top_p {} with {} drafts, not this run's",
                    path.string(), tables.temperature, tables.top_k, tables.top_p, tables.drafts));
              VerifyLatencyOptions lat;
              lat.batches.clear();
              for (std::int32_t b = 1; b <= c.config.int32("lat_batch"); b *= 2) lat.batches.push_back(b);
              lat.tokens.clear();
              for (std::int32_t m = 1; m <= k + 1; ++m) lat.tokens.push_back(m);
              lat.draft_length = k;
              lat.repeats = c.config.int32("lat_reps");
              latency = measure_verify_latency(c.target, *c.draft, companion, lat);
              std::fprintf(stderr, "sv: latency profile (ms), target forward of b sequences x m tokens | fixed:\n");
              for (std::size_t i = 0; i < latency.batches().size(); ++i) {
                std::fprintf(stderr, "  b %3d:", latency.batches()[i]);
                for (std::size_t m = 0; m < latency.tokens().size(); ++m)
                  std::fprintf(stderr, " %7.2f", 1e3 * latency.forward_seconds()[i * latency.tokens().size() + m]);
                std::fprintf(stderr, " | %7.2f\n", 1e3 * latency.fixed()[i]);
              }
            }
            return with_rule<true, true>(c, [&]<class Rule>(Rule rule) {
              return AnyDecoder::make<WithSv<Rule>>(c.config.spec(), c, std::move(companion), sample, std::move(rule),
                                                    std::move(tables), std::move(latency), options);
            });
          }};
}

}  // namespace methods

std::vector<AcceptanceSample> profile_sv_samples(LlamaModel& target, LlamaModel& draft, LlamaModel& companion,
                                                 const SamplingParams& sampling,
                                                 std::span<const std::vector<TokenId>> prompts,
                                                 const SvProfileOptions& o) {
  SvProfilingOptions options;
  options.length = o.length;
  options.sampled_drafts = methods::sampled_drafts(o.drafts, "profile-sv");
  options.max_new_tokens = o.max_new_tokens;
  options.batch = o.batch;
  options.sampling = sampling;
  return profile_sv(target, draft, companion, prompts, options);  // select/sv_profiling.hpp
}

}  // namespace specdec::torch_backend
