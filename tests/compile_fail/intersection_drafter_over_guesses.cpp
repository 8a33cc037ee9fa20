// Must not compile: TLI restricts the draft's distributions to the shared
// tokens, and an n-gram drafter has none, only one-hot guesses.
#include "specdec/draft/intersection_drafter.hpp"
#include "specdec/draft/ngram_drafter.hpp"

template class specdec::IntersectionDrafter<specdec::NgramDrafter>;
