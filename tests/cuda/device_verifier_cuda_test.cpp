// cuda::DeviceVerifier in the one round engine: a model that writes its
// logits to the device, the warp and the rule run there, and every request of
// a mixed greedy and sampled batch must emit exactly the tokens it emits with
// the host path (ModelVerifier), rule by rule, over chains and trees. A rule
// without a device kernel goes through score(), the rows brought back.
// Without a device the [cuda] tests WARN and pass.
#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "device_support.hpp"
#include "specdec/accept/block_verification.hpp"
#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/accept/speculative_sampling.hpp"
#include "specdec/accept/traversal_verification.hpp"
#include "specdec/accept/typical_acceptance.hpp"
#include "specdec/core/logit_rows.hpp"
#include "specdec/cuda/device_verifier.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/tree/dynamic_tree_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "support/catch.hpp"
#include "specdec/testing/hashed_context_model.hpp"

namespace sd = specdec;
using sd::testing::HashedContextModel;

namespace {

constexpr std::int64_t kVocab = 300;

// A rule with no device kernel of its own: recursive rejection sampling
// under another type, so the engine takes the host path (score()).
struct HostOnlyRule : sd::RecursiveRejectionSampling {};

// HashedContextModel whose forward writes device logits where the view is a
// device view, as a CUDA model would.
class DeviceLogitsModel {
 public:
  explicit DeviceLogitsModel(HashedContextModel& inner) : inner_(&inner) {}
  std::int64_t vocab_size() const { return inner_->vocab_size(); }
  std::int64_t hidden_size() const { return inner_->hidden_size(); }
  std::int64_t max_context() const { return inner_->max_context(); }
  void open(std::int32_t seq, const sd::CachePolicy& policy) { inner_->open(seq, policy); }
  void close(std::int32_t seq) { inner_->close(seq); }
  void accept(std::int32_t seq, std::span<const std::int32_t> path) { inner_->accept(seq, path); }
  void rollback(std::int32_t seq, std::int64_t length) { inner_->rollback(seq, length); }
  void forward(const sd::ForwardRequest& request) {
    if (request.logits.empty() || request.logits.device().kind != sd::DeviceKind::kCUDA) {
      inner_->forward(request);
      return;
    }
    const auto rows = request.logits.size(0), vocab = request.logits.size(1);
    sd::ForwardRequest host = request;
    host.logits = host_rows_.view(rows, vocab);
    inner_->forward(host);
    REQUIRE(cudaMemcpy(request.logits.data(), host.logits.data(),
                       static_cast<std::size_t>(rows * vocab) * sizeof(float),
                       cudaMemcpyHostToDevice) == cudaSuccess);
  }

 private:
  HashedContextModel* inner_;
  sd::HostRows host_rows_;
};

// Request i: greedy for i % 3 == 0 (all greedy with `greedy_only`), else
// sampled two ways; each its own seed.
sd::GenerationOptions options_of(std::int32_t i, bool greedy_only) {
  sd::GenerationOptions o;
  o.max_new_tokens = 12 + 3 * i;
  o.request_id = static_cast<std::uint64_t>(80 + i);
  if (!greedy_only && i % 3 == 1) o.sampling = sd::SamplingParams{0.8f, 40, 1.0f};
  if (!greedy_only && i % 3 == 2) o.sampling = sd::SamplingParams{1.0f, 0, 0.9f};
  if (greedy_only) o.sampling.temperature = 0.0f;
  o.sampling.seed = static_cast<std::uint64_t>(11 + i);
  return o;
}

using Drafter = sd::ModelDrafter<HashedContextModel>;

// Six requests stepped together through verifier V; their tokens.
template <class V, class Rule, class Builder>
std::map<std::int32_t, std::vector<sd::TokenId>> run(Builder builder, sd::DraftBudget budget,
                                                     bool greedy_only) {
  using Engine = sd::SpeculativeEngine<Drafter, Builder, V, Rule, sd::FixedLength>;
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, /*noise=*/0.7f);
  DeviceLogitsModel device_target(target);
  auto verifier = [&] {
    if constexpr (std::same_as<V, sd::ModelVerifier<HashedContextModel>>)
      return V(target);
    else
      return V(device_target);
  }();
  Engine engine(std::move(builder), verifier, Rule{});
  std::deque<Drafter> drafters;
  std::deque<sd::FixedLength> policies;
  std::deque<typename Engine::Request> requests;
  for (std::int32_t i = 0; i < 6; ++i) {
    drafters.emplace_back(draft, i);
    policies.emplace_back(budget);
    requests.emplace_back(i, drafters.back(), policies.back(), options_of(i, greedy_only));
    engine.begin(requests.back(), sd::testing::request_prompt(i, kVocab));
  }
  for (;;) {
    std::vector<typename Engine::Request*> batch;
    for (auto& r : requests)
      if (r.active()) batch.push_back(&r);
    if (batch.empty()) break;
    engine.step(batch);
  }
  std::map<std::int32_t, std::vector<sd::TokenId>> out;
  for (auto& r : requests) out[r.seq()] = r.result().tokens;
  return out;
}

template <class Rule, class Builder>
void check_rule(Builder builder, sd::DraftBudget budget, bool greedy_only) {
  using Device = sd::cuda::DeviceVerifier<DeviceLogitsModel>;
  const auto host = run<sd::ModelVerifier<HashedContextModel>, Rule>(builder, budget, greedy_only);
  const auto device = run<Device, Rule>(builder, budget, greedy_only);
  CHECK(device == host);
}

}  // namespace

static_assert(sd::RuleVerifier<sd::cuda::DeviceVerifier<DeviceLogitsModel>, sd::RecursiveRejectionSampling>);
static_assert(sd::RuleVerifier<sd::cuda::DeviceVerifier<DeviceLogitsModel>, sd::SpeculativeSampling>);
static_assert(!sd::RuleVerifier<sd::cuda::DeviceVerifier<DeviceLogitsModel>, HostOnlyRule>);

TEST_CASE("DeviceVerifier: each request emits the host path's tokens, every device rule, chains and trees",
          "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  const sd::DraftBudget chain = sd::FixedLength::chain(4).budget(), tree{3, 8, 8, 0.0f};
  check_rule<sd::RecursiveRejectionSampling>(sd::ChainBuilder{}, chain, false);
  check_rule<sd::RecursiveRejectionSampling>(sd::DynamicTreeBuilder{3, 3, 8}, tree, false);
  check_rule<sd::GreedyAcceptance>(sd::ChainBuilder{}, chain, true);
  check_rule<sd::GreedyAcceptance>(sd::DynamicTreeBuilder{3, 3, 8}, tree, true);
  check_rule<sd::TypicalAcceptance>(sd::DynamicTreeBuilder{3, 3, 8}, tree, false);
  check_rule<sd::TraversalVerification>(sd::ChainBuilder{}, chain, false);
  check_rule<sd::TraversalVerification>(sd::DynamicTreeBuilder{3, 3, 8}, tree, false);
  check_rule<sd::SpeculativeSampling>(sd::ChainBuilder{}, chain, false);
  check_rule<sd::BlockVerification>(sd::ChainBuilder{}, chain, false);
}

TEST_CASE("DeviceVerifier: a rule without a device kernel verifies host rows brought back", "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  check_rule<HostOnlyRule>(sd::ChainBuilder{}, sd::FixedLength::chain(4).budget(), false);
}
