// Must NOT compile: Speculative Verification's selector (arXiv 2509.24328)
// scores every drafted tree against each request's context, but a carry-over
// verifies trees the selector never sees (here DuoDecoding's lagged tail).
#include "specdec/accept/greedy.hpp"
#include "specdec/carry/lagged_tail.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/policy/hardware_budget.hpp"
#include "specdec/select/goodput_selector.hpp"
#include "specdec/tree/multi_sequence_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "specdec/testing/hashed_context_model.hpp"

namespace sd = specdec;
using Model = sd::testing::HashedContextModel;
template class sd::SpeculativeEngine<sd::ModelDrafter<Model>, sd::MultiSequenceBuilder, sd::ModelVerifier<Model>,
                                     sd::GreedyAcceptance, sd::HardwareBudget,
                                     sd::GoodputSelector<sd::ModelVerifier<Model>>, sd::LaggedTail>;
