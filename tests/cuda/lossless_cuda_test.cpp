// The device rule is lossless: cuda::recursive_rejection_sampling, fed the
// host suite's synthetic target/draft pair and drafting strategies
// (statistical/lossless_harness.hpp), emits first and first-two tokens that
// follow the warped target (χ² goodness of fit), on chains and trees in every
// child mode; and the same test rejects the wrong pruned tree, as it does on
// the host. Decodes run in lockstep: each round of every decode still short of
// two tokens is one launch. Without a device the test WARNs and passes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "device_support.hpp"
#include "specdec/core/status.hpp"
#include "specdec/cuda/flat_trees.hpp"
#include "specdec/cuda/recursive_rejection_sampling.hpp"
#include "statistical/lossless_harness.hpp"
#include "support/catch.hpp"

namespace {

namespace sd = specdec;
namespace st = specdec::testing;
using sd::TokenId;
using st::DeviceBuffer;

// outcomes() decodes of two tokens, every round on the device.
st::FitResult run_device_fit(const st::PairCase& c, const sd::SamplingParams& params, st::Strategy s,
                             std::uint64_t seed = 20261121) {
  st::SyntheticPair pair(c, params, seed);
  st::Drafting drafting(pair, seed);
  const std::int64_t n = st::outcomes();
  std::vector<std::vector<TokenId>> emitted(static_cast<std::size_t>(n));
  std::vector<std::int64_t> active(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) active[static_cast<std::size_t>(i)] = i;
  for (std::uint64_t round = 0; !active.empty(); ++round) {
    // Draft each active decode's round on the host.
    std::vector<sd::DraftTree> trees(active.size());
    std::vector<sd::ProbMatrix> draft_rows(active.size());
    for (std::size_t k = 0; k < active.size(); ++k) {
      std::vector<TokenId> ctx = emitted[static_cast<std::size_t>(active[k])];
      drafting.draft(s, ctx, trees[k], draft_rows[k]);
    }
    // Flatten; each slot's target row, and its draft row where children were sampled.
    const sd::cuda::FlatTrees flat(trees);
    const auto batch = flat.batch();
    const std::int32_t max_depth = flat.max_depth();
    const std::size_t v = st::kVocab;
    std::vector<float> draft(flat.draws().size() * v, 0.0f), target(flat.draws().size() * v, 0.0f);
    for (std::size_t k = 0; k < active.size(); ++k) {
      const sd::DraftTree& tree = trees[k];
      const auto b = static_cast<std::int32_t>(k);
      for (std::int32_t slot = sd::DraftTree::kRoot; slot < tree.size(); ++slot) {
        const auto at = static_cast<std::size_t>(flat.row(b, slot));
        std::vector<TokenId> ctx = emitted[static_cast<std::size_t>(active[k])];
        if (slot != sd::DraftTree::kRoot)
          for (auto i : tree.path_to(slot)) ctx.push_back(tree.token(i));
        const auto p = pair.target(ctx);
        std::copy(p.begin(), p.end(), target.begin() + static_cast<std::ptrdiff_t>(at * v));
        if (flat.draws()[at] != 0) {
          const auto q = draft_rows[k].row(tree.children_draft_row(slot));
          std::copy(q.begin(), q.end(), draft.begin() + static_cast<std::ptrdiff_t>(at * v));
        }
      }
    }
    const DeviceBuffer<std::int32_t> d_parents(flat.parents()), d_sizes(flat.sizes());
    const DeviceBuffer<TokenId> d_tokens(flat.tokens());
    const DeviceBuffer<std::uint8_t> d_draws(flat.draws());
    const DeviceBuffer<float> d_draft(draft), d_target(target);
    const DeviceBuffer<std::int32_t> path(
        std::vector<std::int32_t>(static_cast<std::size_t>(batch) * max_depth, -7));
    const DeviceBuffer<std::int32_t> count(std::vector<std::int32_t>(static_cast<std::size_t>(batch), -7));
    const DeviceBuffer<std::int32_t> used(std::vector<std::int32_t>(static_cast<std::size_t>(batch), -7));
    const DeviceBuffer<TokenId> out(std::vector<TokenId>(static_cast<std::size_t>(batch), -7));
    // A fresh seed per round: every tree of every round draws its own stream.
    const sd::Status status = sd::cuda::recursive_rejection_sampling(
        d_parents.get(), d_tokens.get(), d_draws.get(), d_draft.get(), d_target.get(), d_sizes.get(),
        path.get(), count.get(), out.get(), used.get(), batch, flat.nodes(), max_depth, st::kVocab,
        seed + 1000 * (round + 1), 0);
    REQUIRE(std::string(sd::status_string(status)) == "ok");
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const auto got_path = path.to_host();
    const auto got_count = count.to_host();
    const auto got_token = out.to_host();
    std::vector<std::int64_t> still;
    for (std::size_t k = 0; k < active.size(); ++k) {
      REQUIRE(got_count[k] >= 0);
      auto& e = emitted[static_cast<std::size_t>(active[k])];
      for (std::int32_t d = 0; d < got_count[k]; ++d)
        e.push_back(
            trees[k].token(got_path[k * static_cast<std::size_t>(max_depth) + static_cast<std::size_t>(d)]));
      e.push_back(got_token[k]);
      if (e.size() < 2) still.push_back(active[k]);
    }
    active.swap(still);
  }
  // Tally against P(a) = p_root(a) and P(a, b) = p_root(a) p(b | a).
  std::vector<std::int64_t> first(st::kVocab, 0), joint(st::kVocab * st::kVocab, 0);
  for (const auto& e : emitted) {
    ++first[static_cast<std::size_t>(e[0])];
    ++joint[static_cast<std::size_t>(e[0] * st::kVocab + e[1])];
  }
  std::vector<double> p_first(st::kVocab), p_joint(st::kVocab * st::kVocab);
  const auto root = pair.target({});
  for (int a = 0; a < st::kVocab; ++a) {
    p_first[static_cast<std::size_t>(a)] = root[static_cast<std::size_t>(a)];
    const TokenId ctx_a[] = {static_cast<TokenId>(a)};
    const auto next = pair.target(ctx_a);
    for (int b = 0; b < st::kVocab; ++b)
      p_joint[static_cast<std::size_t>(a * st::kVocab + b)] =
          static_cast<double>(root[static_cast<std::size_t>(a)]) * next[static_cast<std::size_t>(b)];
  }
  return {st::chi_square_gof(first, p_first), st::chi_square_gof(joint, p_joint), {}};
}

}  // namespace

TEST_CASE("cuda::recursive_rejection_sampling is lossless on chains and trees in every child mode",
          "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  const auto cases = st::pair_cases();
  const auto settings = st::warp_settings();
  for (const auto s : {st::Strategy::kChainSampled, st::Strategy::kChainGreedyDraft, st::Strategy::kTreeIid,
                       st::Strategy::kTreeNoReplacement, st::Strategy::kTreeTopK, st::Strategy::kTreePruned,
                       st::Strategy::kTreeUnion})
    for (const std::size_t ci : {std::size_t{0}, std::size_t{1}})
      for (const std::size_t wi : {std::size_t{0}, std::size_t{3}}) {
        const auto fit = run_device_fit(cases[ci], settings[wi], s);
        INFO(st::name(s) << ", " << cases[ci].name << ", " << st::describe(settings[wi]));
        INFO("first token: " << fit.first.describe());
        INFO("first two tokens: " << fit.joint.describe());
        CHECK_FALSE(fit.first.rejects(st::kAlpha));
        CHECK_FALSE(fit.joint.rejects(st::kAlpha));
      }
}

TEST_CASE("The device losslessness test rejects MSS on pruned slots chosen by their draws", "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  const auto fit =
      run_device_fit(st::pair_cases()[0], st::warp_settings()[0], st::Strategy::kTreePrunedKeepingModes);
  INFO("first token: " << fit.first.describe());
  INFO("first two tokens: " << fit.joint.describe());
  CHECK(fit.first.rejects(st::kAlpha));
  CHECK(fit.joint.rejects(st::kAlpha));
}
