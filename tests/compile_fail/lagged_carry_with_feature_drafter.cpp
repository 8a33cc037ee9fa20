// Must NOT compile: LaggedTail (DuoDecoding, arXiv 2503.00784) drafts while
// the target verifies, but a feature-level drafter (EAGLE, Lyanna heads) needs
// the target's hidden states of the very tokens it drafts after.
#include <span>

#include "specdec/accept/greedy.hpp"
#include "specdec/carry/lagged_tail.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/policy/hardware_budget.hpp"
#include "specdec/tree/multi_sequence_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "support/hashed_context_model.hpp"

namespace sd = specdec;

struct FeatureReadingDrafter {
  static constexpr bool kProvidesProbs = true;
  std::int64_t vocab_size() const { return 8; }
  void begin(std::span<const sd::TokenId>) {}
  void propose(const sd::DraftRequest&, sd::ProbMatrix&) {}
  void commit(std::span<const sd::TokenId>) {}
  void end() {}
  sd::TargetFeatures& target_features() { return features; }
  sd::TargetFeatures features;
};

using Model = sd::testing::HashedContextModel;
template class sd::SpeculativeEngine<FeatureReadingDrafter, sd::MultiSequenceBuilder, sd::ModelVerifier<Model>,
                                     sd::GreedyAcceptance, sd::HardwareBudget, sd::SelectAll, sd::LaggedTail>;
