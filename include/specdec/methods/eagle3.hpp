// eagle3: an EAGLE-3 head (Li et al., arXiv 2503.01840): step 1 fuses the
// outputs of a low, a middle and a high target layer, later steps read the
// head's own outputs, trained with training-time test and no feature loss
// (torch/draft_head.hpp). It drafts the EAGLE-2 dynamic tree of `eagle`; the
// verifier hands the head the layer outputs it reads
// (FeatureHeadParts, ModelVerifier::set_feature_layers). The backend loads
// the head.
#pragma once

#include <utility>

#include "specdec/methods/eagle.hpp"

namespace specdec::methods {

template <class M, class Head>
MethodInfo<M> eagle3_method(HeadLoader<M, Head> load_head, const MethodHooks<M>& hooks = {}) {
  return eagle_family_method<M, Head>("eagle3",
                                      "EAGLE-3 head over fused low/middle/high target layers, dynamic tree",
                                      "2503.01840", std::move(load_head), hooks);
}

}  // namespace specdec::methods
