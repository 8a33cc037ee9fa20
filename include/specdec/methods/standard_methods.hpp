// The library's methods over any Model, in listing order: a registry a
// command line or a host's engine builds methods from by name. The methods
// that draft with a feature head (lyanna.hpp, eagle.hpp) take the backend's
// head loader, so the backend adds them itself.
//
// A new method is one recipe header, methods/<name>.hpp (its MethodInfo: name,
// parameters, papers, how it is built), and its line here; a host's own
// method is its own recipe and a registry.add() call.
#pragma once

#include <utility>

#include "specdec/methods/autoregressive.hpp"
#include "specdec/methods/chain.hpp"
#include "specdec/methods/duo.hpp"
#include "specdec/methods/dynamic.hpp"
#include "specdec/methods/magicdec.hpp"
#include "specdec/methods/method_registry.hpp"
#include "specdec/methods/ngram.hpp"
#include "specdec/methods/sequoia.hpp"
#include "specdec/methods/slem.hpp"
#include "specdec/methods/suffix.hpp"
#include "specdec/methods/sv.hpp"
#include "specdec/methods/tli.hpp"
#include "specdec/methods/tree.hpp"

namespace specdec {

template <Model M>
MethodRegistry<M> standard_methods(MethodHooks<M> hooks = {}) {
  MethodRegistry<M> r(std::move(hooks));
  r.add(methods::autoregressive_method<M>());
  r.add(methods::chain_method<M>(r.hooks()));
  r.add(methods::tree_method<M>(r.hooks()));
  r.add(methods::dynamic_method<M>(r.hooks()));
  r.add(methods::sequoia_method<M>(r.hooks()));
  r.add(methods::ngram_method<M>());
  r.add(methods::suffix_method<M>());
  r.add(methods::magicdec_method<M>());
  r.add(methods::duo_method<M>());
  r.add(methods::sv_method<M>());
  r.add(methods::slem_method<M>());
  r.add(methods::tli_method<M>());
  return r;
}

}  // namespace specdec
