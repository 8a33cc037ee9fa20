// Must NOT compile: LaggedTail (DuoDecoding, arXiv 2503.00784) drafts while
// the target verifies, but a feature-level drafter (EAGLE, Lyanna heads) needs
// the target's hidden states of the very tokens it drafts after.
#include "specdec/accept/greedy.hpp"
#include "specdec/carry/lagged_tail.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/policy/hardware_budget.hpp"
#include "specdec/tree/multi_sequence_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "support/feature_reading_drafter.hpp"
#include "specdec/testing/hashed_context_model.hpp"

namespace sd = specdec;
using sd::testing::FeatureReadingDrafter;

using Model = sd::testing::HashedContextModel;
template class sd::SpeculativeEngine<FeatureReadingDrafter, sd::MultiSequenceBuilder, sd::ModelVerifier<Model>,
                                     sd::GreedyAcceptance, sd::HardwareBudget, sd::SelectAll, sd::LaggedTail>;
