// Must not compile: the drafter reads the target's hidden states
// (target_features(), as EAGLE and Lyanna heads do) but the verifier cannot
// hand them over (no begin(seq, prompt, TargetFeatures*)).
#include <span>

#include "specdec/accept/greedy.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "support/feature_reading_drafter.hpp"

namespace sd = specdec;
using sd::testing::FeatureReadingDrafter;

struct VerifierWithoutFeatures {
  std::int64_t max_context() const { return 64; }
  void begin(std::int32_t, std::span<const sd::TokenId>) {}
  void score(std::span<const sd::ScoreItem>, std::span<sd::ProbRows>) {}
  void commit(std::int32_t, const sd::DraftTree&, const sd::VerifyResult&) {}
  void end(std::int32_t) {}
};

int main() {
  VerifierWithoutFeatures verifier;
  sd::SpeculativeEngine<FeatureReadingDrafter, sd::ChainBuilder, VerifierWithoutFeatures, sd::GreedyAcceptance,
                        sd::FixedLength>
      engine(sd::ChainBuilder{}, verifier, sd::GreedyAcceptance{});
  (void)engine;
}
