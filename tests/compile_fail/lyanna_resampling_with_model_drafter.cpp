// Must NOT compile: LyannaResampling re-samples the next round's tree from the
// rows the drafter gave this round (last_logits(), a OnePassDrafter); a
// draft model keeps no such rows.
#include "specdec/accept/greedy.hpp"
#include "specdec/carry/lyanna_resampling.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "specdec/testing/hashed_context_model.hpp"

using Model = specdec::testing::HashedContextModel;
template class specdec::SpeculativeEngine<specdec::ModelDrafter<Model>, specdec::ChainBuilder,
                                          specdec::ModelVerifier<Model>, specdec::GreedyAcceptance,
                                          specdec::FixedLength, specdec::SelectAll, specdec::LyannaResampling>;
