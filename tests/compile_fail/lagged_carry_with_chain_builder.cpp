// Must NOT compile: LaggedTail (DuoDecoding) verifies a carried tail while the
// builder drafts below it, and ChainBuilder cannot grow a carried tail. CTest
// checks that the compiler names the problem in a sentence
// (tests/compile_fail/CMakeLists.txt).
#include "specdec/accept/greedy.hpp"
#include "specdec/carry/lagged_tail.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/speculative_decoder.hpp"
#include "specdec/policy/hardware_budget.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "specdec/testing/hashed_context_model.hpp"

using Model = specdec::testing::HashedContextModel;
template class specdec::SpeculativeDecoder<specdec::ModelDrafter<Model>, specdec::ChainBuilder,
                                           specdec::ModelVerifier<Model>, specdec::GreedyAcceptance,
                                           specdec::HardwareBudget, specdec::SelectAll, specdec::LaggedTail>;
