// Must NOT compile: SpeculativeSampling verifies chains only, and a static
// tree builder builds trees. CTest checks that the compiler names the problem
// in a sentence (tests/compile_fail/CMakeLists.txt).
#include "specdec/accept/speculative_sampling.hpp"
#include "specdec/draft/ngram_drafter.hpp"
#include "specdec/engine/speculative_decoder.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/tree/static_tree_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "specdec/testing/hashed_context_model.hpp"

using Verifier = specdec::ModelVerifier<specdec::testing::HashedContextModel>;
template class specdec::SpeculativeDecoder<specdec::NgramDrafter, specdec::StaticTreeBuilder, Verifier,
                                           specdec::SpeculativeSampling, specdec::FixedLength>;
