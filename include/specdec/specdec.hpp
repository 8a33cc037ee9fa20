// Umbrella header of the backend-free core: everything a host engine needs to
// assemble a speculative decoder over its own Model. No libtorch, no CUDA.
#pragma once

#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/accept/speculative_sampling.hpp"
#include "specdec/accept/typical_acceptance.hpp"
#include "specdec/concepts.hpp"
#include "specdec/core/acceptance_stats.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/draft_tree_ops.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/tensor_view.hpp"
#include "specdec/core/version.hpp"
#include "specdec/core/warp.hpp"
