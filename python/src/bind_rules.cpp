// Every acceptance rule: verify(tree, target, draft, rng) over NumPy rows.
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "specdec/accept/block_verification.hpp"
#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/accept/speculative_sampling.hpp"
#include "specdec/accept/traversal_verification.hpp"
#include "specdec/accept/typical_acceptance.hpp"
#include "specdec/concepts.hpp"

namespace specdec::python {

using namespace pybind11::literals;

namespace {

constexpr const char* kVerifyDoc =
    "Verifies `tree` (a DraftTree) and returns a VerifyResult. target: [len(tree) + 1, vocab] probability "
    "rows, "
    "the root's first, then node i's at row i + 1 (warp() makes them from logits); draft: the rows the "
    "tree's "
    "slots were drafted from (children_draft_row), [rows, vocab]; rng: the RandomStream of the rule's draws. "
    "float32 C-contiguous arrays (NumPy, or torch tensors and others through DLPack) are read in place.";

template <class Rule>
py::class_<Rule> bind_rule(py::module_& m, const char* name, const char* doc) {
  py::class_<Rule> c(m, name, doc);
  c.def(
       "verify",
       [](Rule& rule, const DraftTree& tree, const py::object& target, const py::object& draft,
          RandomStream& rng) {
         const InputRows t(target, "verify: target"), d(draft, "verify: draft");
         py::gil_scoped_release unlocked;
         return rule.verify(tree, t.rows(), d.rows(), rng);
       },
       "tree"_a, "target"_a, "draft"_a, "rng"_a, kVerifyDoc)
      .def_property_readonly_static("lossless", [](py::object) { return Rule::kLossless; })
      .def_property_readonly_static("needs_draft_probs", [](py::object) { return Rule::kNeedsDraftProbs; })
      .def_property_readonly_static("greedy_only", [](py::object) { return kRuleGreedyOnly<Rule>; });
  return c;
}

}  // namespace

void bind_rules(py::module_& m) {
  bind_rule<GreedyAcceptance>(m, "GreedyAcceptance",
                              "Accept while the draft is the target's argmax; for greedy requests only.")
      .def(py::init<>());
  bind_rule<SpeculativeSampling>(
      m, "SpeculativeSampling",
      "Speculative sampling on a chain (arXiv 2211.17192, Algorithm 1; arXiv 2302.01318).")
      .def(py::init<>());
  bind_rule<RecursiveRejectionSampling>(
      m, "RecursiveRejectionSampling",
      "Recursive rejection sampling over a tree, every child mode (SpecInfer, arXiv 2305.09781, §4.3, "
      "Algorithm 2; "
      "Sequoia, arXiv 2402.12374, §3.2, for children drawn without replacement).")
      .def(py::init<>());
  bind_rule<BlockVerification>(m, "BlockVerification",
                               "Block verification of a chain (arXiv 2403.10444, Algorithm 2).")
      .def(py::init<>());
  bind_rule<TraversalVerification>(
      m, "TraversalVerification",
      "Traversal verification of a tree, leaf to root (arXiv 2505.12398, Algorithm 1).")
      .def(py::init<>());
  py::class_<TypicalAcceptanceParams>(m, "TypicalAcceptanceParams")
      .def(py::init([](float threshold, float alpha) {
             TypicalAcceptanceParams p{threshold, alpha};
             p.validate();
             return p;
           }),
           "posterior_threshold"_a = 0.09f, "posterior_alpha"_a = 0.3f)
      .def_readwrite("posterior_threshold", &TypicalAcceptanceParams::posterior_threshold)
      .def_readwrite("posterior_alpha", &TypicalAcceptanceParams::posterior_alpha);
  bind_rule<TypicalAcceptance>(
      m, "TypicalAcceptance",
      "Medusa's typical acceptance (arXiv 2401.10774, §2.3.1): LOSSY, faster acceptance.")
      .def(py::init<TypicalAcceptanceParams>(), "params"_a = TypicalAcceptanceParams{});
}

}  // namespace specdec::python
