// Must NOT compile: the selector slot takes a Selector (select(batch) over the
// round's drafted trees), not any type.
#include "specdec/accept/greedy.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "specdec/testing/hashed_context_model.hpp"

using Model = specdec::testing::HashedContextModel;
struct NotASelector {};
template class specdec::SpeculativeEngine<specdec::ModelDrafter<Model>, specdec::ChainBuilder,
                                          specdec::ModelVerifier<Model>, specdec::GreedyAcceptance,
                                          specdec::FixedLength, NotASelector>;
