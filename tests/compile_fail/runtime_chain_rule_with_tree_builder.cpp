// Must NOT compile: a rule chosen at run time among the chain rules
// (RuntimeRule<true, _>, which may hold BlockVerification) with a static
// tree builder, which builds trees: the same sentence as the rule itself.
#include "specdec/accept/runtime_rule.hpp"
#include "specdec/draft/ngram_drafter.hpp"
#include "specdec/engine/speculative_decoder.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/tree/static_tree_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "specdec/testing/hashed_context_model.hpp"

using Verifier = specdec::ModelVerifier<specdec::testing::HashedContextModel>;
template class specdec::SpeculativeDecoder<specdec::NgramDrafter, specdec::StaticTreeBuilder, Verifier,
                                           specdec::RuntimeRule<true, false>, specdec::FixedLength>;
