// Drafting from Python: draft budgets, the n-gram drafter, the tree builders
// over any drafter (the n-gram one, or a Python object with the Drafter
// methods), Sequoia's shapes and the length policies (LengthPolicy).
#include <pybind11/stl.h>

#include <type_traits>
#include <variant>

#include "bindings.hpp"
#include "specdec/concepts.hpp"
#include "specdec/draft/ngram_drafter.hpp"
#include "specdec/draft/suffix_drafter.hpp"
#include "specdec/policy/confidence_stop.hpp"
#include "specdec/policy/cost_aware_tree.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/policy/follow_verified.hpp"
#include "specdec/policy/hardware_budget.hpp"
#include "specdec/policy/heuristic_length.hpp"
#include "specdec/policy/round_shape.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/tree/dynamic_tree_builder.hpp"
#include "specdec/tree/multi_sequence_builder.hpp"
#include "specdec/tree/sequoia.hpp"
#include "specdec/tree/static_tree_builder.hpp"
#include "specdec/tree/suffix_tree_builder.hpp"

namespace specdec::python {

using namespace pybind11::literals;

namespace {

// A Python object as a Drafter (concepts.hpp): vocab_size, begin(tokens,
// sampling), propose(tree, frontier) -> [len(frontier), vocab] probability
// rows (a zero row: no proposal), commit(tokens), end().
class PyDrafter {
 public:
  static constexpr bool kProvidesProbs = true;

  explicit PyDrafter(py::object drafter) : d_(std::move(drafter)) {
    for (const char* method : {"begin", "propose", "commit", "end"})
      if (!py::hasattr(d_, method))
        throw InvalidArgumentError(
            fmt::format("a Python drafter needs the method {}() (docs/python.md)", method));
    py::object v = d_.attr("vocab_size");
    vocab_ = (PyCallable_Check(v.ptr()) ? v() : v).cast<std::int64_t>();
    if (vocab_ < 1) throw InvalidArgumentError("a Python drafter needs vocab_size, a positive int");
  }

  std::int64_t vocab_size() const { return vocab_; }
  void begin(std::span<const TokenId> tokens, const SamplingParams& sampling) {
    sampling_ = sampling;
    d_.attr("begin")(std::vector<TokenId>(tokens.begin(), tokens.end()), sampling);
  }
  const SamplingParams& sampling() const { return sampling_; }  // ChainPick::kByRequest reads it
  void propose(const DraftRequest& request, ProbMatrix& rows) {
    const std::vector<std::int32_t> frontier(request.frontier.begin(), request.frontier.end());
    const py::object out =
        d_.attr("propose")(py::cast(request.tree, py::return_value_policy::reference), frontier);
    const InputRows in(out, "a Python drafter's propose()");
    const ProbRows& r = in.rows();
    if (r.num_rows() != static_cast<std::int64_t>(frontier.size()) || r.vocab() != vocab_)
      throw ShapeError(
          fmt::format("a Python drafter's propose() returned [{}, {}] rows for {} slots of vocabulary {}",
                      r.num_rows(), r.vocab(), frontier.size(), vocab_));
    if (rows.num_rows() == 0 && rows.vocab() != vocab_) rows.resize(0, vocab_);
    for (std::int64_t i = 0; i < r.num_rows(); ++i) std::ranges::copy(r.row(i), rows.append_row().begin());
  }
  void commit(std::span<const TokenId> tokens) {
    d_.attr("commit")(std::vector<TokenId>(tokens.begin(), tokens.end()));
  }
  void end() { d_.attr("end")(); }

 private:
  py::object d_;
  std::int64_t vocab_ = 0;
  SamplingParams sampling_{0.0f};
};
static_assert(Drafter<PyDrafter>);

py::array_t<float> to_numpy(const ProbMatrix& m) {
  py::array_t<float> out({m.num_rows(), m.vocab()});
  for (std::int64_t r = 0; r < m.num_rows(); ++r) std::ranges::copy(m.row(r), out.mutable_data(r, 0));
  return out;
}

// builder.build(drafter, budget, root, rng) -> (DraftTree, rows): the bound
// n-gram drafter directly, any other object through PyDrafter.
template <class Builder>
py::tuple build(Builder& builder, const py::object& drafter, const DraftBudget& budget, TokenId root,
                RandomStream& rng) {
  DraftTree tree;
  ProbMatrix rows;
  if constexpr (std::is_same_v<Builder, SuffixTreeBuilder>) {
    if (!py::isinstance<SuffixDrafter>(drafter))
      throw InvalidArgumentError("SuffixTreeBuilder.build: the drafter must be a SuffixDrafter");
    builder.build(drafter.cast<SuffixDrafter&>(), budget, root, rng, tree, rows);
  } else if (py::isinstance<NgramDrafter>(drafter)) {
    builder.build(drafter.cast<NgramDrafter&>(), budget, root, rng, tree, rows);
  } else if (py::isinstance<SuffixDrafter>(drafter)) {
    builder.build(drafter.cast<SuffixDrafter&>(), budget, root, rng, tree, rows);
  } else {
    PyDrafter d(drafter);
    builder.build(d, budget, root, rng, tree, rows);
  }
  return py::make_tuple(std::move(tree), to_numpy(rows));
}

constexpr const char* kBuildDoc =
    "Drafts a tree rooted at `root` (the last committed token) within `budget`, asking `drafter` (an "
    "NgramDrafter, or any object with vocab_size, begin, propose(tree, frontier), commit and end) for rows; "
    "returns (DraftTree, rows), the draft rows its slots refer to. `rng` draws sampled children.";

template <class Builder>
py::class_<Builder> bind_builder(py::module_& m, const char* name, const char* doc) {
  py::class_<Builder> c(m, name, doc);
  c.def("build", &build<Builder>, "drafter"_a, "budget"_a, "root"_a, "rng"_a, kBuildDoc);
  return c;
}

RoundOutcome outcome_of(std::int32_t drafted, std::int32_t verified, std::int32_t accepted, double draft_us,
                        double verify_us, double target_model_us, double draft_model_us) {
  RoundOutcome o;
  o.num_drafted = drafted;
  o.num_verified = verified < 0 ? drafted : verified;
  o.num_accepted = accepted;
  o.draft_us = draft_us;
  o.verify_us = verify_us;
  o.target_model_us = target_model_us;
  o.draft_model_us = draft_model_us;
  return o;
}

template <class Policy>
py::class_<Policy> bind_policy(py::module_& m, const char* name, const char* doc) {
  py::class_<Policy> c(m, name, doc);
  c.def("budget", &Policy::budget, "The DraftBudget of the next round.")
      .def(
          "observe",
          [](Policy& p, std::int32_t drafted, std::int32_t accepted, std::int32_t verified, double draft_us,
             double verify_us, double target_model_us, double draft_model_us, const DraftTree* tree,
             const std::vector<std::int32_t>& accepted_nodes) {
            RoundOutcome o =
                outcome_of(drafted, verified, accepted, draft_us, verify_us, target_model_us, draft_model_us);
            o.tree = tree;
            o.accepted_nodes = accepted_nodes;
            p.observe(o);
          },
          "num_drafted"_a, "num_accepted"_a, "num_verified"_a = -1, "draft_us"_a = 0.0, "verify_us"_a = 0.0,
          "target_model_us"_a = 0.0, "draft_model_us"_a = 0.0, "tree"_a = nullptr,
          "accepted_nodes"_a = std::vector<std::int32_t>{},
          "Tells the policy how a round went: counts (num_verified defaults to num_drafted), times in "
          "microseconds, and the verified tree with its accepted path (VerifyResult.accepted_nodes), which "
          "CostAwareTree learns acceptance from.");
  return c;
}

}  // namespace

void bind_drafting(py::module_& m) {
  py::class_<DraftBudget>(m, "DraftBudget", "What one round may draft (core/round.hpp).")
      .def(py::init([](std::int32_t max_depth, std::int32_t max_nodes,
                       std::optional<std::int32_t> verify_nodes, float stop_below, std::int32_t branch) {
             return DraftBudget{max_depth, max_nodes, verify_nodes.value_or(max_nodes), stop_below, branch};
           }),
           "max_depth"_a = 4, "max_nodes"_a = 4, "verify_nodes"_a = py::none(), "stop_below"_a = 0.0f,
           "branch"_a = 0)
      .def_readwrite("max_depth", &DraftBudget::max_depth)
      .def_readwrite("max_nodes", &DraftBudget::max_nodes)
      .def_readwrite("verify_nodes", &DraftBudget::verify_nodes)
      .def_readwrite("stop_below", &DraftBudget::stop_below)
      .def_readwrite("branch", &DraftBudget::branch)
      .def("__repr__", [](const DraftBudget& b) {
        return fmt::format(
            "DraftBudget(max_depth={}, max_nodes={}, verify_nodes={}, stop_below={}, branch={})", b.max_depth,
            b.max_nodes, b.verify_nodes, b.stop_below, b.branch);
      });

  py::class_<NgramDrafter>(
      m, "NgramDrafter",
      "Prompt-lookup drafting (n-gram matches in the context; one-hot rows, so rules that read "
      "q see deterministic drafts).")
      .def(py::init<std::int64_t, std::int32_t, std::int32_t>(), "vocab_size"_a, "min_ngram"_a = 1,
           "max_ngram"_a = 3)
      .def_property_readonly("vocab_size", &NgramDrafter::vocab_size)
      .def(
          "begin",
          [](NgramDrafter& d, const std::vector<TokenId>& prompt, const SamplingParams& sampling) {
            d.begin(prompt, sampling);
          },
          "prompt"_a, "sampling"_a = SamplingParams{0.0f})
      .def(
          "commit", [](NgramDrafter& d, const std::vector<TokenId>& tokens) { d.commit(tokens); }, "tokens"_a)
      .def("end", &NgramDrafter::end)
      .def(
          "propose",
          [](NgramDrafter& d, const DraftTree& tree, const std::vector<std::int32_t>& frontier) {
            ProbMatrix rows;
            d.propose(DraftRequest{&tree, frontier}, rows);
            return to_numpy(rows);
          },
          "tree"_a, "frontier"_a,
          "One-hot rows for the frontier slots of `tree`; a zero row where nothing matches.");

  py::class_<SuffixCache>(m, "SuffixCache",
                          "SuffixDecoding's global index of earlier outputs (arXiv 2411.04975), shared by "
                          "SuffixDrafters; the oldest responses are evicted beyond max_cached.")
      .def(py::init<std::int32_t, std::int64_t>(), "max_depth"_a = 32, "max_cached"_a = 256)
      .def_property_readonly("num_nodes", [](const SuffixCache& c) { return c.index().num_nodes(); })
      .def_property_readonly("num_tokens", [](const SuffixCache& c) { return c.index().num_tokens(); })
      .def_property_readonly("bytes", [](const SuffixCache& c) { return c.index().bytes(); });
  py::class_<SuffixDrafter>(m, "SuffixDrafter",
                            "SuffixDecoding's drafter: the request's own suffix index and the cache's "
                            "(frequency estimates; deterministic drafts).")
      .def(py::init([](std::int64_t vocab, SuffixCache* cache, std::int32_t depth, std::int32_t max_tokens,
                       double factor, float min_prob, bool tree) {
             return SuffixDrafter(vocab, cache, depth, SuffixSpeculation{max_tokens, factor, min_prob, tree});
           }),
           "vocab_size"_a, "cache"_a = nullptr, "max_depth"_a = 32, "max_tokens"_a = 16, "factor"_a = 1.0,
           "min_prob"_a = 0.1f, "tree"_a = true, py::keep_alive<1, 3>())
      .def_property_readonly("vocab_size", &SuffixDrafter::vocab_size)
      .def(
          "begin",
          [](SuffixDrafter& d, const std::vector<TokenId>& prompt, const SamplingParams& sampling) {
            d.begin(prompt, sampling);
          },
          "prompt"_a, "sampling"_a = SamplingParams{0.0f})
      .def(
          "commit", [](SuffixDrafter& d, const std::vector<TokenId>& tokens) { d.commit(tokens); },
          "tokens"_a)
      .def("end", &SuffixDrafter::end)
      .def(
          "speculate",
          [](const SuffixDrafter& d, std::int32_t max_tokens) {
            const SuffixDraft s = d.speculate(max_tokens);
            return py::dict("tokens"_a = s.tokens, "parents"_a = s.parents, "probs"_a = s.probs,
                            "score"_a = s.score, "match_len"_a = s.match_len);
          },
          "max_tokens"_a = 16,
          "The better index's speculation tree: tokens, parents, probs, score, match_len.")
      .def(
          "propose",
          [](SuffixDrafter& d, const DraftTree& tree, const std::vector<std::int32_t>& frontier) {
            ProbMatrix rows;
            d.propose(DraftRequest{&tree, frontier}, rows);
            return to_numpy(rows);
          },
          "tree"_a, "frontier"_a);
  bind_builder<SuffixTreeBuilder>(
      m, "SuffixTreeBuilder",
      "SuffixDecoding's speculation tree from a SuffixDrafter (arXiv 2411.04975, §3.2).")
      .def(py::init<>());

  py::enum_<ChainPick>(m, "ChainPick", "How a chain's tokens are picked from their rows.")
      .value("BY_REQUEST", ChainPick::kByRequest)
      .value("TOP1", ChainPick::kTop1)
      .value("SAMPLE", ChainPick::kSample);
  bind_builder<ChainBuilder>(m, "ChainBuilder", "One token per depth (arXiv 2211.17192, §2.3).")
      .def(py::init<ChainPick>(), "pick"_a = ChainPick::kByRequest);
  bind_builder<StaticTreeBuilder>(
      m, "StaticTreeBuilder",
      "A fixed tree shape, Medusa's choices (arXiv 2401.10774, §2.1.2), drafted level "
      "by level.")
      .def(py::init([](std::vector<std::vector<std::int32_t>> choices, ChildMode mode) {
             return StaticTreeBuilder(StaticTreeShape::from_choices(std::move(choices)), mode);
           }),
           "choices"_a, "mode"_a = ChildMode::kDeterministic);
  bind_builder<DynamicTreeBuilder>(m, "DynamicTreeBuilder", "EAGLE-2's dynamic tree (arXiv 2406.16858, §4).")
      .def(py::init<std::int32_t, std::int32_t, std::int32_t>(), "top_k"_a = 10, "depth"_a = 6,
           "total_tokens"_a = 60);
  bind_builder<MultiSequenceBuilder>(m, "MultiSequenceBuilder",
                                     "DuoDecoding's dynamic multi-sequence drafts (arXiv 2503.00784, §3.2).")
      .def(py::init([](std::int32_t max_sequences, std::int32_t sequences, ChainPick pick) {
             return MultiSequenceBuilder(MultiSequenceOptions{max_sequences, sequences, pick});
           }),
           "max_sequences"_a = 8, "sequences"_a = 0, "pick"_a = ChainPick::kByRequest);
  m.def(
      "sequoia_choices",
      [](const std::vector<double>& p, std::int32_t budget_nodes, std::int32_t max_depth) {
        return sequoia_shape(p, budget_nodes, max_depth).choices();
      },
      "acceptance"_a, "budget_nodes"_a, "max_depth"_a,
      "Sequoia's optimal tree shape (arXiv 2402.12374, §3.1.1) for the positional acceptance vector p (p[k]: "
      "the chance the k-th child is the accepted one), as Medusa choices for StaticTreeBuilder.");

  bind_policy<FixedLength>(m, "FixedLength", "The same budget every round.")
      .def(py::init<DraftBudget>(), "budget"_a);
  bind_policy<HeuristicLength>(m, "HeuristicLength",
                               "HF transformers' heuristic: +2 after a fully accepted chain, -1 otherwise.")
      .def(py::init<std::int32_t, std::int32_t>(), "initial_k"_a = 5, "max_k"_a = 32);
  bind_policy<ConfidenceStop>(m, "ConfidenceStop", "A fixed budget that stops below a draft confidence.")
      .def(py::init<DraftBudget, float>(), "base"_a, "threshold"_a = ConfidenceStop::kDefaultThreshold);
  bind_policy<FollowVerified>(m, "FollowVerified", "Drafts one more than the last round verified.")
      .def(py::init<std::int32_t>(), "max_length"_a);
  bind_policy<HardwareBudget>(m, "HardwareBudget",
                              "A chain of gamma drafts, gamma from the hardware's cost ratio.")
      .def(py::init<std::int32_t>(), "gamma"_a);
  bind_policy<CostAwareTree>(
      m, "CostAwareTree",
      "Sequoia's hardware-aware budget (arXiv 2402.12374, §3.2): the depth, branch and "
      "size that maximise accepted tokens per second, re-planned as rounds are observed.")
      .def(py::init([](std::vector<std::int32_t> tokens, std::vector<double> seconds, DraftBudget initial,
                       std::int32_t min_rounds, std::int32_t replan_every, double prior_weight,
                       bool chains_only) {
             return CostAwareTree(VerifyLatency({1}, std::move(tokens), std::move(seconds), {0.0}), initial,
                                  CostAwareOptions{min_rounds, replan_every, prior_weight, chains_only});
           }),
           "latency_tokens"_a, "latency_seconds"_a, "initial"_a, "min_rounds"_a = 16, "replan_every"_a = 16,
           "prior_weight"_a = 20.0, "chains_only"_a = false);

  py::class_<RoundShape>(
      m, "RoundShape",
      "A method's round in target steps, with the draft step c and the verification slope s "
      "free (policy/round_shape.hpp; docs/regime.md).")
      .def(py::init([](double tokens, double serial_drafts, double overlapped_drafts, double verified_tokens,
                       double slowdown, double fixed) {
             RoundShape r{tokens, serial_drafts, overlapped_drafts, verified_tokens, slowdown, fixed};
             r.check();
             return r;
           }),
           "tokens"_a, "serial_drafts"_a = 0.0, "overlapped_drafts"_a = 0.0, "verified_tokens"_a = 1.0,
           "slowdown"_a = 1.0, "fixed"_a = 0.0)
      .def_readonly("tokens", &RoundShape::tokens)
      .def_readonly("serial_drafts", &RoundShape::serial_drafts)
      .def_readonly("overlapped_drafts", &RoundShape::overlapped_drafts)
      .def_readonly("verified_tokens", &RoundShape::verified_tokens)
      .def_readonly("slowdown", &RoundShape::slowdown)
      .def_readonly("fixed", &RoundShape::fixed)
      .def("steps", &RoundShape::steps, "c"_a, "s"_a, "Target steps a round takes.")
      .def("tokens_per_step", &RoundShape::tokens_per_step, "c"_a, "s"_a,
           "Tokens per target step: the speedup over autoregressive decoding.")
      .def("__repr__", [](const RoundShape& r) {
        return fmt::format(
            "RoundShape(tokens={:.3f}, serial_drafts={:.3f}, overlapped_drafts={:.3f}, "
            "verified_tokens={:.3f}, slowdown={:.3f}, fixed={:.3f})",
            r.tokens, r.serial_drafts, r.overlapped_drafts, r.verified_tokens, r.slowdown, r.fixed);
      });
  m.def("speedup_over", &speedup_over, "method"_a, "base"_a, "c"_a, "s"_a,
        "How much faster `method` decodes than `base` at draft step c and verification slope s.");
  m.def("break_even_draft_step", &break_even_draft_step, "method"_a, "base"_a, "s"_a, "c_max"_a,
        "The draft step in [0, c_max] where the two decode equally fast at slope s, or None.");
}

}  // namespace specdec::python
