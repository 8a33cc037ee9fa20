// Errors, sampling parameters, the warp, random streams and draft trees.
#include <pybind11/stl.h>

#include <optional>
#include <vector>

#include <fmt/ranges.h>

#include "bindings.hpp"
#include "specdec/accept/row_math.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/verify_result.hpp"
#include "specdec/core/version.hpp"
#include "specdec/core/warp.hpp"

namespace specdec::python {

using namespace pybind11::literals;

namespace {

void bind_errors(py::module_& m) {
  // specdec.Error and one subclass per C++ type; pybind11 tries the last
  // registered translator first, so each C++ type maps to its own class.
  auto& base = py::register_exception<Error>(m, "Error", PyExc_RuntimeError);
  py::register_exception<InvalidArgumentError>(m, "InvalidArgumentError", base.ptr());
  py::register_exception<ShapeError>(m, "ShapeError", base.ptr());
  py::register_exception<InvalidDistributionError>(m, "InvalidDistributionError", base.ptr());
  py::register_exception<InvalidTreeError>(m, "InvalidTreeError", base.ptr());
  py::register_exception<UnsupportedError>(m, "UnsupportedError", base.ptr());
  py::register_exception<ModelLoadError>(m, "ModelLoadError", base.ptr());
  py::register_exception<IoError>(m, "IoError", base.ptr());
  py::register_exception<TokenizerError>(m, "TokenizerError", base.ptr());
  py::register_exception<DeviceError>(m, "DeviceError", base.ptr());
}

void bind_sampling(py::module_& m) {
  py::class_<SamplingParams>(
      m, "SamplingParams",
      "How a request samples: temperature (0 = greedy), top_k (0 = off), top_p (1 = off), "
      "and the seed of its random streams.")
      .def(py::init([](float temperature, std::int32_t top_k, float top_p, std::uint64_t seed) {
             SamplingParams p{temperature, top_k, top_p, seed};
             p.validate();
             return p;
           }),
           "temperature"_a = 1.0f, "top_k"_a = 0, "top_p"_a = 1.0f, "seed"_a = 0)
      .def_readwrite("temperature", &SamplingParams::temperature)
      .def_readwrite("top_k", &SamplingParams::top_k)
      .def_readwrite("top_p", &SamplingParams::top_p)
      .def_readwrite("seed", &SamplingParams::seed)
      .def_property_readonly("is_greedy", &SamplingParams::is_greedy)
      .def("validate", &SamplingParams::validate)
      .def("__repr__", [](const SamplingParams& p) {
        return fmt::format("SamplingParams(temperature={}, top_k={}, top_p={}, seed={})", p.temperature,
                           p.top_k, p.top_p, p.seed);
      });

  m.def(
      "warp",
      [](const py::object& logits, const SamplingParams& params) {
        const InputRows input(logits, "warp");
        const ProbRows& in = input.rows();
        py::array_t<float> out(input.shape());
        float* o = out.mutable_data();
        {
          py::gil_scoped_release unlocked;
          Warper warper;
          for (std::int64_t r = 0; r < in.num_rows(); ++r)
            warper(in.row(r), params, std::span(o + r * in.vocab(), static_cast<std::size_t>(in.vocab())));
        }
        return out;
      },
      "logits"_a, "params"_a,
      "Probability rows of logits ([vocab] or [rows, vocab]) under temperature, top-k and top-p, exactly as "
      "the engine warps them (core/warp.hpp). Raises InvalidDistributionError for NaN, +inf or all -inf "
      "rows.");
}

void bind_rng(py::module_& m) {
  py::class_<RandomStream>(
      m, "RandomStream",
      "A counter-based Philox4x32-10 stream (core/rng.hpp): draw j of (seed, stream) is the "
      "same wherever it is taken, host or device.")
      .def(py::init<std::uint64_t, std::uint64_t, std::uint64_t>(), "seed"_a, "stream"_a = 0, "offset"_a = 0)
      .def("uniform", &RandomStream::uniform, "The next uniform in [0, 1).")
      .def(
          "sample",
          [](RandomStream& rng, const py::object& weights) {
            const InputRows w(weights, "RandomStream.sample: weights");
            if (w.shape().size() != 1) throw ShapeError("RandomStream.sample: weights must be 1-d");
            const TokenId t = row_math::sample_row(w.rows().row(0).data(), w.rows().vocab(), rng.uniform());
            if (t == kNoToken) throw InvalidDistributionError("RandomStream.sample: no weight is positive");
            return t;
          },
          "weights"_a,
          "A token drawn from non-negative weights (normalised or not) with the next uniform, as the rules "
          "draw.")
      .def_property_readonly("seed", &RandomStream::seed)
      .def_property_readonly("stream", &RandomStream::stream)
      .def_property_readonly("offset", &RandomStream::offset, "index of the next draw");
}

void bind_tree(py::module_& m) {
  py::enum_<ChildMode>(m, "ChildMode", "How the children of one slot were drafted from their row q.")
      .value("NONE", ChildMode::kNone)
      .value("SAMPLED_WITH_REPLACEMENT", ChildMode::kSampledWithReplacement)
      .value("SAMPLED_WITHOUT_REPLACEMENT", ChildMode::kSampledWithoutReplacement)
      .value("DETERMINISTIC", ChildMode::kDeterministic);

  py::class_<DraftTree>(
      m, "DraftTree",
      "The token tree a round drafts and the target verifies (core/draft_tree.hpp). Nodes are "
      "topologically ordered; parent -1 is the root (the last committed token). Each slot (-1 "
      "or a node) with children records the draft row they came from and how (ChildMode).")
      .def(py::init<TokenId>(), "root_token"_a)
      .def_static(
          "from_parents",
          [](TokenId root, const std::vector<TokenId>& tokens, const std::vector<std::int32_t>& parents,
             std::optional<std::vector<float>> draft_probs) {
            return DraftTree::from_parents(root, tokens, parents,
                                           draft_probs.value_or(std::vector<float>(tokens.size(), 0.0f)));
          },
          "root_token"_a, "tokens"_a, "parents"_a, "draft_probs"_a = py::none(),
          "A tree from parallel lists (parents[i] in [-1, i)); draft_probs default to 0 (rules read q from "
          "the draft rows). Record each slot's draft row with set_children_source.")
      .def_static(
          "chain",
          [](TokenId root, const std::vector<TokenId>& tokens, std::optional<std::vector<float>> draft_probs,
             ChildMode mode) {
            std::vector<std::int32_t> parents(tokens.size());
            for (std::size_t i = 0; i < parents.size(); ++i) parents[i] = static_cast<std::int32_t>(i) - 1;
            DraftTree t = DraftTree::from_parents(
                root, tokens, parents, draft_probs.value_or(std::vector<float>(tokens.size(), 0.0f)));
            for (std::int32_t i = 0; i < t.size(); ++i) t.set_children_source(i - 1, i, mode);
            return t;
          },
          "root_token"_a, "tokens"_a, "draft_probs"_a = py::none(),
          "mode"_a = ChildMode::kSampledWithReplacement,
          "A chain whose token i was drafted from draft row i (the root's children from row 0), in `mode`.")
      .def("add_node", &DraftTree::add_node, "parent"_a, "token"_a, "draft_prob"_a = 0.0f)
      .def("set_children_source", &DraftTree::set_children_source, "parent"_a, "draft_row"_a, "mode"_a)
      .def_property_readonly("root_token", &DraftTree::root_token)
      .def("__len__", &DraftTree::size)
      .def_property_readonly("tokens",
                             [](const DraftTree& t) {
                               std::vector<TokenId> out;
                               for (const auto& n : t.nodes()) out.push_back(n.token);
                               return out;
                             })
      .def_property_readonly("parents",
                             [](const DraftTree& t) {
                               std::vector<std::int32_t> out;
                               for (const auto& n : t.nodes()) out.push_back(n.parent);
                               return out;
                             })
      .def_property_readonly("depths",
                             [](const DraftTree& t) {
                               std::vector<std::int32_t> out;
                               for (const auto& n : t.nodes()) out.push_back(n.depth);
                               return out;
                             })
      .def_property_readonly("draft_probs",
                             [](const DraftTree& t) {
                               std::vector<float> out;
                               for (const auto& n : t.nodes()) out.push_back(n.draft_prob);
                               return out;
                             })
      .def("children", &DraftTree::children, "parent"_a)
      .def("children_mode", &DraftTree::children_mode, "parent"_a)
      .def("children_draft_row", &DraftTree::children_draft_row, "parent"_a)
      .def_property_readonly("is_chain", &DraftTree::is_chain)
      .def_property_readonly("max_depth", &DraftTree::max_depth)
      .def("path_to", &DraftTree::path_to, "node"_a)
      .def("leaf_paths", &DraftTree::leaf_paths)
      .def(
          "ancestor_mask",
          [](const DraftTree& t, bool include_root) {
            const BitMatrix mask = t.ancestor_mask(include_root);
            const auto n = static_cast<py::ssize_t>(t.size() + (include_root ? 1 : 0));
            py::array_t<bool> out({n, n});
            auto o = out.mutable_unchecked<2>();
            for (py::ssize_t i = 0; i < n; ++i)
              for (py::ssize_t j = 0; j < n; ++j)
                o(i, j) = mask.test(static_cast<std::int32_t>(i), static_cast<std::int32_t>(j));
            return out;
          },
          "include_root"_a = true, "[n, n] booleans: row i sees column j (its ancestors and itself).")
      .def("__repr__", [](const DraftTree& t) {
        return fmt::format("DraftTree(root_token={}, nodes={}{})", t.root_token(), t.size(),
                           t.is_chain() ? ", chain" : "");
      });

  py::class_<VerifyResult>(m, "VerifyResult",
                           "A rule's outcome on one tree: the accepted path and the bonus token.")
      .def(py::init<>())
      .def_readonly("accepted_nodes", &VerifyResult::accepted_nodes)
      .def_readonly("bonus_token", &VerifyResult::bonus_token)
      .def_readonly("depth_accepted", &VerifyResult::depth_accepted)
      .def_property_readonly("num_accepted", &VerifyResult::num_accepted)
      .def("emitted_tokens", &VerifyResult::emitted_tokens, "tree"_a,
           "The tokens this round commits: the accepted drafts, then the bonus token.")
      .def("__repr__", [](const VerifyResult& r) {
        return fmt::format("VerifyResult(accepted_nodes={}, bonus_token={})",
                           fmt::join(r.accepted_nodes, ","), r.bonus_token);
      });
}

}  // namespace

void bind_core(py::module_& m) {
  m.attr("__version__") = kVersion;
  bind_errors(m);
  bind_sampling(m);
  bind_rng(m);
  bind_tree(m);
}

}  // namespace specdec::python
