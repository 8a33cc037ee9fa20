// Must not compile: SpeculativeSampling reads every drafted token's
// probability, and an n-gram drafter proposes one-hot guesses, not
// probabilities.
#include "specdec/accept/speculative_sampling.hpp"
#include "specdec/draft/ngram_drafter.hpp"
#include "specdec/engine/speculative_decoder.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "specdec/testing/hashed_context_model.hpp"

using Verifier = specdec::ModelVerifier<specdec::testing::HashedContextModel>;
template class specdec::SpeculativeDecoder<specdec::NgramDrafter, specdec::ChainBuilder, Verifier,
                                           specdec::SpeculativeSampling, specdec::FixedLength>;
