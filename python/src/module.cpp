// specdec's Python module: the C++ components themselves, bound with pybind11
// (docs/python.md). The pure-Python parts (python/specdec/*.py) import it.
#include "bindings.hpp"

PYBIND11_MODULE(_specdec, m) {
  m.doc() = "specdec: speculative decoding components (C++), bound for Python";
  specdec::python::bind_core(m);
  specdec::python::bind_rules(m);
  specdec::python::bind_drafting(m);
  specdec::python::bind_engine(m);
  specdec::python::bind_torch(m);
  auto testing = m.def_submodule("testing", "the statistical harness of specdec's losslessness tests");
  specdec::python::bind_testing(testing);
}
