// specdec::cuda::typical_acceptance against the host rule TypicalAcceptance
// (lossy): for the same trees, rows, parameters, seed and offset, tree b must
// accept the same path and emit the same token as the host rule drawing from
// RandomStream(seed, b, offset). Without a device the [cuda] tests WARN and pass.
#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "device_support.hpp"
#include "specdec/accept/typical_acceptance.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/status.hpp"
#include "specdec/cuda/flat_trees.hpp"
#include "specdec/cuda/typical_acceptance.hpp"
#include "support/catch.hpp"
#include "support/random_tree.hpp"

namespace {

using specdec::Status;
using specdec::TokenId;
using specdec::testing::DeviceBuffer;

}  // namespace

TEST_CASE("cuda::typical_acceptance rejects bad arguments before touching a device", "[unit]") {
  using specdec::cuda::typical_acceptance;
  std::int32_t ints[4] = {};
  TokenId ids[4] = {};
  float rows[8] = {};
  const auto call = [&](std::int32_t batch, std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab,
                        float eps = 0.09f, float alpha = 0.3f) {
    return typical_acceptance(ints, ids, rows, nullptr, ints, ints, ids, batch, nodes, max_depth, vocab, eps,
                              alpha, 1, 0);
  };
  CHECK(call(-1, 1, 1, 2) == Status::kInvalidArgument);
  CHECK(call(1, 1, 2, 2) == Status::kInvalidArgument);
  CHECK(call(1, 1, 1, 0) == Status::kInvalidArgument);
  CHECK(call(1, 1, 1, (std::int64_t{1} << 21) + 1) == Status::kInvalidArgument);
  CHECK(call(1, 1, 1, 2, 0.0f) == Status::kInvalidArgument);
  CHECK(call(1, 1, 1, 2, 1.5f) == Status::kInvalidArgument);
  CHECK(call(1, 1, 1, 2, 0.09f, 0.0f) == Status::kInvalidArgument);
  CHECK(typical_acceptance(ints, ids, nullptr, nullptr, ints, ints, ids, 1, 1, 1, 2, 0.09f, 0.3f, 1, 0) ==
        Status::kInvalidArgument);
  CHECK(call(0, 1, 1, 2) == Status::kOk);
}

TEST_CASE("cuda::typical_acceptance accepts exactly the host rule's path and emits its token", "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  std::mt19937 gen(43);
  int cases = 0, deep = 0;
  struct Size {
    std::int64_t vocab;
    std::int32_t batch, nodes;
  };
  for (const Size size : {Size{50, 300, 12}, Size{8192, 40, 10}, Size{128256, 4, 8}}) {
    for (const auto params :
         {specdec::TypicalAcceptanceParams{}, specdec::TypicalAcceptanceParams{0.3f, 0.55f}}) {
      const std::int64_t vocab = size.vocab;
      std::vector<specdec::testing::RandomTree> random(static_cast<std::size_t>(size.batch));
      std::vector<specdec::DraftTree> trees;
      for (auto& r : random) {
        r = specdec::testing::random_tree(gen, vocab, size.nodes);
        trees.push_back(r.tree);
      }
      const specdec::cuda::FlatTrees flat(trees);
      const auto v = static_cast<std::size_t>(vocab);
      std::vector<float> target(
          static_cast<std::size_t>(flat.batch()) * static_cast<std::size_t>(flat.nodes() + 1) * v, 0.0f);
      for (std::int32_t b = 0; b < flat.batch(); ++b)
        std::copy(random[static_cast<std::size_t>(b)].target_rows.begin(),
                  random[static_cast<std::size_t>(b)].target_rows.end(),
                  target.begin() + flat.row(b, specdec::DraftTree::kRoot) * static_cast<std::ptrdiff_t>(v));
      const std::uint64_t seed = 77 + static_cast<std::uint64_t>(vocab), offset = 3;
      const std::int32_t max_depth = flat.max_depth();
      const DeviceBuffer<std::int32_t> parents(flat.parents()), sizes(flat.sizes());
      const DeviceBuffer<TokenId> tokens(flat.tokens());
      const DeviceBuffer<float> rows(target);
      const DeviceBuffer<std::int32_t> path(
          std::vector<std::int32_t>(static_cast<std::size_t>(flat.batch()) * max_depth, -7));
      const DeviceBuffer<std::int32_t> count(
          std::vector<std::int32_t>(static_cast<std::size_t>(flat.batch()), -7));
      const DeviceBuffer<TokenId> emitted(std::vector<TokenId>(static_cast<std::size_t>(flat.batch()), -7));
      const Status s = specdec::cuda::typical_acceptance(
          parents.get(), tokens.get(), rows.get(), sizes.get(), path.get(), count.get(), emitted.get(),
          flat.batch(), flat.nodes(), max_depth, vocab, params.posterior_threshold, params.posterior_alpha,
          seed, offset);
      REQUIRE(std::string(specdec::status_string(s)) == "ok");
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      const auto got_path = path.to_host();
      const auto got_count = count.to_host();
      const auto got_emitted = emitted.to_host();
      specdec::TypicalAcceptance rule(params);
      for (std::int32_t b = 0; b < flat.batch(); ++b) {
        const auto& t = random[static_cast<std::size_t>(b)];
        const specdec::ProbRows target_rows(t.target_rows.data(), t.tree.size() + 1, vocab);
        specdec::RandomStream rng(seed, static_cast<std::uint64_t>(b), offset);
        const auto want = rule.verify(t.tree, target_rows, {}, rng);
        INFO("vocab " << vocab << ", tree " << b << " of " << t.tree.size() << " nodes");
        REQUIRE(got_count[static_cast<std::size_t>(b)] ==
                static_cast<std::int32_t>(want.accepted_nodes.size()));
        for (std::size_t k = 0; k < want.accepted_nodes.size(); ++k)
          CHECK(got_path[static_cast<std::size_t>(b) * static_cast<std::size_t>(max_depth) + k] ==
                want.accepted_nodes[k]);
        CHECK(got_emitted[static_cast<std::size_t>(b)] == want.bonus_token);
        ++cases;
        deep += want.accepted_nodes.size() >= 2;
      }
    }
  }
  CHECK(cases > 600);
  CHECK(deep > 30);  // paths really went deep
}
