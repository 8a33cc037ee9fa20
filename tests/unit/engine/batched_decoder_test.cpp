// The batched decoder: one target forward per round for all active sequences,
// requests joining and finishing at different times, and every sequence's
// greedy output equal to its own autoregressive output.
#include <cstdint>
#include <map>
#include <vector>

#include "specdec/accept/greedy.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/autoregressive_decoder.hpp"
#include "specdec/engine/batched_speculative_decoder.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/policy/heuristic_length.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/tree/dynamic_tree_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "support/catch.hpp"
#include "support/hashed_context_model.hpp"

namespace sd = specdec;
using sd::testing::HashedContextModel;

namespace {

constexpr std::int64_t kVocab = 20;

std::vector<sd::TokenId> prompt_of(std::int32_t seq) {
  std::vector<sd::TokenId> p;
  for (std::int32_t i = 0; i < 2 + seq % 5; ++i) p.push_back(static_cast<sd::TokenId>((seq * 7 + i * 3) % kVocab));
  return p;
}

std::vector<sd::TokenId> greedy_reference(std::span<const sd::TokenId> prompt, std::int64_t n) {
  HashedContextModel target(kVocab, 1);
  target.start_sequence(0);
  sd::AutoregressiveDecoder ar(target, sd::SamplingParams{0.0f});
  sd::GenerationOptions o;
  o.max_new_tokens = n;
  return ar.generate(prompt, o).tokens;
}

template <class Builder, class Policy>
void check_batched(Builder builder, std::function<Policy()> policy) {
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, /*noise=*/0.7f);
  sd::ModelVerifier verifier(target, sd::SamplingParams{0.0f});
  auto make_drafter = [&](std::int32_t seq) {
    draft.start_sequence(seq);
    return sd::ModelDrafter<HashedContextModel>(draft, seq, sd::SamplingParams{1.0f});
  };
  sd::BatchedSpeculativeDecoder<sd::ModelDrafter<HashedContextModel>, Builder, sd::ModelVerifier<HashedContextModel>,
                                sd::GreedyAcceptance, Policy>
      decoder(make_drafter, std::move(builder), verifier, sd::GreedyAcceptance{}, policy);
  std::map<std::int32_t, std::int64_t> lengths;
  std::map<std::int32_t, std::vector<sd::TokenId>> streamed, results;
  auto submit = [&](std::int32_t seq, std::int64_t n) {
    target.start_sequence(seq);
    sd::BatchRequest r;
    r.seq_id = seq;
    r.prompt = prompt_of(seq);
    r.options.max_new_tokens = n;
    r.on_token = [&streamed, seq](sd::TokenId t) { streamed[seq].push_back(t); };
    lengths[seq] = n;
    decoder.submit(std::move(r));
  };
  for (std::int32_t s = 0; s < 4; ++s) submit(s, 10 + 9 * s);  // different lengths: finish at different times
  submit(9, 0);                                                 // nothing to generate
  std::int64_t forwards_before = target.forwards();
  std::int64_t rounds = 0;
  for (int r = 0; decoder.num_active() > 0 || r < 3; ++r) {
    if (r == 3) submit(4, 25), submit(5, 7);  // join between rounds
    forwards_before = target.forwards();
    const bool had_active = decoder.num_active() > 0;
    for (auto& done : decoder.step()) results[done.seq_id] = done.result.tokens;
    if (had_active) {
      ++rounds;
      CHECK(target.forwards() - forwards_before == 1);  // one target forward for the whole batch
    }
  }
  CHECK(rounds == decoder.rounds());
  REQUIRE(results.size() == lengths.size());
  for (const auto& [seq, n] : lengths) {
    INFO("sequence " << seq);
    CHECK(results[seq] == greedy_reference(prompt_of(seq), n));
    CHECK(streamed[seq] == results[seq]);
  }
}

}  // namespace

TEST_CASE("Batched chain speculation equals per-sequence greedy decoding", "[unit][engine]") {
  check_batched<sd::ChainBuilder, sd::FixedLength>(sd::ChainBuilder{}, [] { return sd::FixedLength::chain(3); });
  check_batched<sd::ChainBuilder, sd::HeuristicLength>(sd::ChainBuilder{}, [] { return sd::HeuristicLength(2); });
}

TEST_CASE("Batched dynamic-tree speculation equals per-sequence greedy decoding", "[unit][engine]") {
  check_batched<sd::DynamicTreeBuilder, sd::FixedLength>(
      sd::DynamicTreeBuilder{3, 3, 8}, [] { return sd::FixedLength(sd::DraftBudget{3, 8, 8, 0.0f}); });
}

TEST_CASE("The batched decoder rejects bad requests with typed errors", "[unit][engine]") {
  HashedContextModel target(kVocab, 1), draft(kVocab, 1);
  target.start_sequence(0);
  draft.start_sequence(0);
  sd::ModelVerifier verifier(target, sd::SamplingParams{0.0f});
  sd::BatchedSpeculativeDecoder<sd::ModelDrafter<HashedContextModel>, sd::ChainBuilder,
                                sd::ModelVerifier<HashedContextModel>, sd::GreedyAcceptance, sd::FixedLength>
      decoder([&](std::int32_t seq) { return sd::ModelDrafter<HashedContextModel>(draft, seq, sd::SamplingParams{1.0f}); },
              sd::ChainBuilder{}, verifier, sd::GreedyAcceptance{}, [] { return sd::FixedLength::chain(2); });
  sd::BatchRequest r;
  CHECK_THROWS_AS(decoder.submit(r), sd::InvalidArgumentError);  // empty prompt
  r.prompt = {1, 2};
  r.options.max_new_tokens = 5;
  decoder.submit(r);
  CHECK_THROWS_AS(decoder.submit(r), sd::InvalidArgumentError);  // sequence 0 is active
  r.seq_id = 1;
  r.options.max_new_tokens = -2;
  CHECK_THROWS_AS(decoder.submit(r), sd::InvalidArgumentError);
}

TEST_CASE("A batched request that fills the context ends there; the others go on", "[unit][engine]") {
  constexpr std::int64_t kContext = 30;
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, /*noise=*/0.7f);
  target.set_max_context(kContext);
  sd::ModelVerifier verifier(target, sd::SamplingParams{0.0f});
  sd::BatchedSpeculativeDecoder<sd::ModelDrafter<HashedContextModel>, sd::DynamicTreeBuilder,
                                sd::ModelVerifier<HashedContextModel>, sd::GreedyAcceptance, sd::FixedLength>
      decoder(
          [&](std::int32_t seq) {
            draft.start_sequence(seq);
            return sd::ModelDrafter<HashedContextModel>(draft, seq, sd::SamplingParams{1.0f});
          },
          sd::DynamicTreeBuilder{3, 3, 8}, verifier, sd::GreedyAcceptance{},
          [] { return sd::FixedLength(sd::DraftBudget{3, 8, 8, 0.0f}); });
  const std::map<std::int32_t, std::int64_t> max_new = {{0, 1000}, {1, 10}, {2, 1000}};
  for (const auto& [seq, n] : max_new) {
    target.start_sequence(seq);
    sd::BatchRequest r;
    r.seq_id = seq;
    r.prompt = prompt_of(seq);
    r.options.max_new_tokens = n;
    decoder.submit(std::move(r));
  }
  for (const auto& done : decoder.run()) {
    INFO("sequence " << done.seq_id);
    const auto room = kContext - static_cast<std::int64_t>(prompt_of(done.seq_id).size());
    const auto n = std::min(max_new.at(done.seq_id), room);
    CHECK(done.result.tokens == greedy_reference(prompt_of(done.seq_id), n));
    CHECK(done.result.stop_reason ==
          (n == room ? sd::StopReason::kContextLimit : sd::StopReason::kMaxNewTokens));
  }
}
