// Speculative Verification's profiling run (Kim et al., arXiv 2509.24328,
// §4.2) over any Model: standard speculative decoding with draft chains of
// `length` tokens, every draft verified, recording for each drafted token its
// indicators (S, A) against the companion model and X, the probability that
// the target's rule accepts it given its prefix: min(1, p/q) for a sampled
// draft, p for a top-1 one (1 or 0 when greedy). AcceptanceTable::fit turns
// the samples into the tables GoodputSelector reads; `specdec profile-sv`
// runs this on the libtorch models, a host engine on its own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/concepts.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/continuous_batch.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/select/acceptance_table.hpp"
#include "specdec/select/goodput_selector.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/verify/model_verifier.hpp"

namespace specdec {

struct SvProfilingOptions {
  std::int32_t length = 5;        // drafted tokens per round
  bool sampled_drafts = false;    // draws from the draft (true) or its top-1 chain
  std::int64_t max_new_tokens = 32;
  std::size_t batch = 8;          // requests at once
  SamplingParams sampling{0.0f};  // every request's; request i's seed is sampling.seed + i
};

// Runs the prompts through target, draft and companion (sequence ids 0 ..
// prompts.size() - 1 in each; all three must be distinct models or at least
// not hold those sequences) and returns one sample per drafted token.
template <Model M>
std::vector<AcceptanceSample> profile_sv(M& target, M& draft, M& companion_model,
                                         std::span<const std::vector<TokenId>> prompts,
                                         const SvProfilingOptions& o) {
  if (o.length < 1) throw InvalidArgumentError(fmt::format("profile_sv: draft length {} (need >= 1)", o.length));
  if (o.sampled_drafts && o.sampling.is_greedy())
    throw InvalidArgumentError("profile_sv: sampled drafts need a temperature above 0");
  std::vector<AcceptanceSample> samples;
  auto run = [&]<class Rule>(Rule rule) {
    using Selector = GoodputSelector<ModelVerifier<M>>;
    using Engine = SpeculativeEngine<ModelDrafter<M>, ChainBuilder, ModelVerifier<M>, Rule, FixedLength, Selector>;
    ModelVerifier<M> verifier(target), companion(companion_model);
    GoodputOptions all;
    all.verify_all = true;
    Engine engine(ChainBuilder{o.sampled_drafts ? ChainPick::kSample : ChainPick::kTop1}, verifier, std::move(rule),
                  Selector(companion, {}, {}, {}, all));
    engine.set_round_view_observer([&](const RoundView& v) {
      const auto& round = engine.selector().last_round(v.seq);
      const DraftTree& tree = *v.tree;
      for (std::int32_t i = 0; i < tree.size(); ++i) {
        const float p = v.target.row(i)[static_cast<std::size_t>(tree.token(i))];  // the target at node i's position
        const float q = tree.node(i).draft_prob;
        const float x =
            tree.children_mode(i - 1) == ChildMode::kDeterministic ? p : std::min(1.0f, q > 0 ? p / q : 1.0f);
        const auto& ind = round.indicators[static_cast<std::size_t>(i)];
        samples.push_back({ind.similarity, ind.acceptance, std::clamp(x, 0.0f, 1.0f)});
      }
    });
    std::vector<GenerationOptions> options(prompts.size());
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      options[i].max_new_tokens = o.max_new_tokens;
      options[i].sampling = o.sampling;
      options[i].sampling.seed = o.sampling.seed + i;
    }
    struct Slot {
      Slot(M& d, std::int32_t seq, std::int32_t k, const GenerationOptions& g)
          : drafter(d, seq), policy(FixedLength::chain(k)), request(seq, drafter, policy, g) {}
      ModelDrafter<M> drafter;
      FixedLength policy;
      typename Engine::Request request;
    };
    run_continuous_batch(engine, prompts, o.batch, [&](std::size_t i) {
      return std::make_unique<Slot>(draft, static_cast<std::int32_t>(i), o.length, options[i]);
    });
  };
  if (o.sampling.is_greedy())
    run(GreedyAcceptance{});
  else
    run(RecursiveRejectionSampling{});
  return samples;
}

}  // namespace specdec
