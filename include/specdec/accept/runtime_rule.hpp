// An acceptance rule chosen at run time: one of the library's rules behind
// one type, so that a method whose rule is a parameter (rule=, in
// methods/method_rules.hpp) composes its engine once instead of once per rule.
// Composing the engine is most of what a method costs to compile; with a
// type per rule, every registry compiled the engines of every method up to
// six times.
//
// The type keeps the static pairing checks. The rules that verify chains
// only (BlockVerification; SpeculativeSampling, which also reads every draft
// probability) are among the choices only with kChains (and kProbs), and the
// type then declares kChainOnly (and kNeedsDraftProbs): RuntimeRule<true, _>
// fails to compile with a tree builder, as BlockVerification does. What an
// engine reads from a rule's type it reads here from the rule held:
// lossless(), greedy_only(), name() (concepts.hpp, rule_lossless).
//
// verify() calls the held rule's verify with the same arguments: the same
// draws from the same stream, so the output is the held rule's, bit for bit.
#pragma once

#include <concepts>
#include <type_traits>
#include <utility>
#include <variant>

#include "specdec/accept/block_verification.hpp"
#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/accept/speculative_sampling.hpp"
#include "specdec/accept/traversal_verification.hpp"
#include "specdec/accept/typical_acceptance.hpp"
#include "specdec/concepts.hpp"

namespace specdec {

template <bool kChains, bool kProbs>
class RuntimeRule {
  using TreeRules =
      std::variant<GreedyAcceptance, RecursiveRejectionSampling, TraversalVerification, TypicalAcceptance>;
  using ChainRules = std::variant<GreedyAcceptance, RecursiveRejectionSampling, TraversalVerification,
                                  TypicalAcceptance, BlockVerification>;
  using ChainProbRules = std::variant<GreedyAcceptance, RecursiveRejectionSampling, TraversalVerification,
                                      TypicalAcceptance, BlockVerification, SpeculativeSampling>;

 public:
  using Choice =
      std::conditional_t<kChains, std::conditional_t<kProbs, ChainProbRules, ChainRules>, TreeRules>;

  static constexpr bool kChainOnly = kChains;
  static constexpr bool kNeedsDraftProbs = kChains && kProbs;

  // Any rule among the choices; another one does not compile.
  template <class R>
  requires std::constructible_from<Choice, R>
  RuntimeRule(R rule) : rule_(std::move(rule)) {}  // NOLINT(google-explicit-constructor): a rule is a rule

  bool lossless() const {
    return visit([](const auto& r) { return std::decay_t<decltype(r)>::kLossless; });
  }
  bool greedy_only() const {
    return visit([](const auto& r) { return kRuleGreedyOnly<std::decay_t<decltype(r)>>; });
  }
  const char* name() const {
    return visit([](const auto& r) -> const char* { return std::decay_t<decltype(r)>::kName; });
  }

  // Not const: some rules keep scratch rows between calls.
  void verify(const DraftTree& tree, const ProbRows& target, const ProbRows& draft, RandomStream& rng,
              VerifyResult& out) {
    visit([&](auto& r) { r.verify(tree, target, draft, rng, out); });
  }
  VerifyResult verify(const DraftTree& tree, const ProbRows& target, const ProbRows& draft,
                      RandomStream& rng) {
    VerifyResult out;
    verify(tree, target, draft, rng, out);
    return out;
  }

  // f(the rule held): for a verifier that runs each rule its own way (a
  // device verifier, cuda/device_verifier.hpp).
  template <class F>
  decltype(auto) visit(F&& f) {
    return std::visit(std::forward<F>(f), rule_);
  }
  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), rule_);
  }

 private:
  Choice rule_;
};

}  // namespace specdec
