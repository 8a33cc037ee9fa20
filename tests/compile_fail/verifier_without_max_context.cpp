// Must NOT compile: a verifier that does not say how many tokens its model's
// sequences hold would let generation run past a full context.
#include <span>

#include "specdec/accept/greedy.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/testing/hashed_context_model.hpp"

namespace sd = specdec;

struct VerifierWithoutContext {
  void begin(std::int32_t, std::span<const sd::TokenId>) {}
  void score(std::span<const sd::ScoreItem>, std::span<sd::ProbRows>) {}
  void commit(std::int32_t, const sd::DraftTree&, const sd::VerifyResult&) {}
  void end(std::int32_t) {}
};

using Model = sd::testing::HashedContextModel;
template class sd::SpeculativeEngine<sd::ModelDrafter<Model>, sd::ChainBuilder, VerifierWithoutContext,
                                     sd::GreedyAcceptance, sd::FixedLength>;
