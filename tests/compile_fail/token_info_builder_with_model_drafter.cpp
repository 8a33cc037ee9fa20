// Must NOT compile: TokenInfoTreeBuilder (Lyanna, arXiv 2602.21224 §4.2)
// reads all of a round's rows in one pass (a OnePassDrafter), and a draft
// model's rows depend on the tokens drafted before them.
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/tree/token_info_tree.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "specdec/testing/hashed_context_model.hpp"

using Model = specdec::testing::HashedContextModel;
template class specdec::SpeculativeEngine<specdec::ModelDrafter<Model>, specdec::TokenInfoTreeBuilder,
                                          specdec::ModelVerifier<Model>, specdec::RecursiveRejectionSampling,
                                          specdec::FixedLength>;
