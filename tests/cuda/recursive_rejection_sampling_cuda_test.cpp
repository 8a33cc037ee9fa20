// specdec::cuda::recursive_rejection_sampling against the host rule
// RecursiveRejectionSampling: for the same trees, rows, seed and offset, tree
// b must accept the same path, emit the same token and consume the same
// number of uniforms as the host rule drawing from RandomStream(seed, b,
// offset), in every child mode and in mixed trees of different sizes in one
// launch. Without a device the [cuda] tests WARN and pass.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "device_support.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/status.hpp"
#include "specdec/cuda/recursive_rejection_sampling.hpp"
#include "support/catch.hpp"
#include "support/random_tree.hpp"

namespace {

using specdec::Status;
using specdec::TokenId;
using specdec::testing::DeviceBuffer;

// Random mixed-mode trees of up to `nodes` nodes, padded to `nodes`. A third
// of the slots get a target row equal to their draft row, so that sampled
// children are accepted and paths go deep.
struct Batch {
  std::vector<std::int32_t> parents, sizes;
  std::vector<TokenId> tokens;
  std::vector<std::uint8_t> draws;
  std::vector<float> draft, target;  // [batch, nodes + 1, vocab]
  std::vector<specdec::testing::RandomTree> trees;
  std::int32_t max_depth = 1;
};

Batch make_batch(std::mt19937& gen, std::int32_t batch, std::int32_t nodes, std::int64_t vocab) {
  Batch out;
  const auto v = static_cast<std::size_t>(vocab);
  for (std::int32_t b = 0; b < batch; ++b) {
    auto t = specdec::testing::random_tree(gen, vocab, nodes);
    const std::int32_t n = t.tree.size();
    for (std::int32_t r = 0; r <= n; ++r)
      if (gen() % 3 == 0)
        std::copy_n(t.draft_rows.begin() + static_cast<std::ptrdiff_t>(r * v), v,
                    t.target_rows.begin() + static_cast<std::ptrdiff_t>(r * v));
    out.max_depth = std::max(out.max_depth, t.tree.max_depth());
    out.sizes.push_back(n);
    const auto pad = static_cast<std::size_t>(nodes - n);
    out.parents.insert(out.parents.end(), t.parents.begin(), t.parents.end());
    out.parents.insert(out.parents.end(), pad, -1);
    out.tokens.insert(out.tokens.end(), t.tokens.begin(), t.tokens.end());
    out.tokens.insert(out.tokens.end(), pad, 0);
    out.draws.insert(out.draws.end(), t.draws.begin(), t.draws.end());
    out.draws.insert(out.draws.end(), pad, 0);
    out.draft.insert(out.draft.end(), t.draft_rows.begin(), t.draft_rows.end());
    out.draft.insert(out.draft.end(), pad * v, 0.0f);
    out.target.insert(out.target.end(), t.target_rows.begin(), t.target_rows.end());
    out.target.insert(out.target.end(), pad * v, 0.0f);
    out.trees.push_back(std::move(t));
  }
  return out;
}

}  // namespace

TEST_CASE("cuda::recursive_rejection_sampling rejects bad arguments before touching a device", "[unit]") {
  using specdec::cuda::recursive_rejection_sampling;
  std::int32_t ints[4] = {};
  TokenId ids[4] = {};
  std::uint8_t draws[4] = {};
  float rows[8] = {};
  const auto call = [&](std::int32_t batch, std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab) {
    return recursive_rejection_sampling(ints, ids, draws, rows, rows, nullptr, ints, ints, ids, ints, batch,
                                        nodes, max_depth, vocab, 1, 0);
  };
  CHECK(call(-1, 1, 1, 2) == Status::kInvalidArgument);
  CHECK(call(1, -1, 0, 2) == Status::kInvalidArgument);
  CHECK(call(1, 1, 2, 2) == Status::kInvalidArgument);
  CHECK(call(1, 1, 1, 0) == Status::kInvalidArgument);
  CHECK(call(1, 1, 1, (std::int64_t{1} << 21) + 1) == Status::kInvalidArgument);
  CHECK(recursive_rejection_sampling(ints, ids, nullptr, rows, rows, nullptr, ints, ints, ids, ints, 1, 1, 1,
                                     2, 1, 0) == Status::kInvalidArgument);
  CHECK(recursive_rejection_sampling(ints, ids, draws, rows, rows, nullptr, ints, ints, ids, nullptr, 1, 1, 1,
                                     2, 1, 0) == Status::kInvalidArgument);
  CHECK(call(0, 1, 1, 2) == Status::kOk);
}

TEST_CASE("cuda::recursive_rejection_sampling emits exactly the host rule's path, token and draws",
          "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  std::mt19937 gen(41);
  int cases = 0, deep = 0, rejected_all = 0;
  struct Size {
    std::int64_t vocab;
    std::int32_t batch, nodes;
  };
  for (const Size size :
       {Size{3, 400, 6}, Size{50, 300, 12}, Size{8192, 40, 10}, Size{32000, 12, 10}, Size{128256, 4, 8}}) {
    const std::int64_t vocab = size.vocab;
    const std::int32_t batch = size.batch, nodes = size.nodes;
    const Batch in = make_batch(gen, batch, nodes, vocab);
    const std::uint64_t seed = 0xC0FFEEull + static_cast<std::uint64_t>(vocab), offset = 5;
    const DeviceBuffer<std::int32_t> parents(in.parents), sizes(in.sizes);
    const DeviceBuffer<TokenId> tokens(in.tokens);
    const DeviceBuffer<std::uint8_t> draws(in.draws);
    const DeviceBuffer<float> draft(in.draft), target(in.target);
    const DeviceBuffer<std::int32_t> path(
        std::vector<std::int32_t>(static_cast<std::size_t>(batch) * in.max_depth, -7));
    const DeviceBuffer<std::int32_t> count(std::vector<std::int32_t>(static_cast<std::size_t>(batch), -7));
    const DeviceBuffer<std::int32_t> used(std::vector<std::int32_t>(static_cast<std::size_t>(batch), -7));
    const DeviceBuffer<TokenId> emitted(std::vector<TokenId>(static_cast<std::size_t>(batch), -7));
    const Status s = specdec::cuda::recursive_rejection_sampling(
        parents.get(), tokens.get(), draws.get(), draft.get(), target.get(), sizes.get(), path.get(),
        count.get(), emitted.get(), used.get(), batch, nodes, in.max_depth, vocab, seed, offset);
    REQUIRE(std::string(specdec::status_string(s)) == "ok");
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const auto got_path = path.to_host();
    const auto got_count = count.to_host();
    const auto got_used = used.to_host();
    const auto got_emitted = emitted.to_host();
    specdec::RecursiveRejectionSampling rule;
    for (std::int32_t b = 0; b < batch; ++b) {
      const auto& t = in.trees[static_cast<std::size_t>(b)];
      const auto rows = static_cast<std::size_t>(nodes + 1) * static_cast<std::size_t>(vocab);
      const specdec::ProbRows target_rows(in.target.data() + static_cast<std::size_t>(b) * rows,
                                          t.tree.size() + 1, vocab);
      specdec::RandomStream rng(seed, static_cast<std::uint64_t>(b), offset);
      const auto want = rule.verify(t.tree, target_rows, t.draft_matrix.view(), rng);
      INFO("vocab " << vocab << ", tree " << b << " of " << t.tree.size() << " nodes");
      REQUIRE(got_count[static_cast<std::size_t>(b)] ==
              static_cast<std::int32_t>(want.accepted_nodes.size()));
      for (std::size_t k = 0; k < want.accepted_nodes.size(); ++k)
        CHECK(got_path[static_cast<std::size_t>(b) * in.max_depth + k] == want.accepted_nodes[k]);
      for (std::size_t k = want.accepted_nodes.size(); k < static_cast<std::size_t>(in.max_depth); ++k)
        CHECK(got_path[static_cast<std::size_t>(b) * in.max_depth + k] == -1);
      CHECK(got_emitted[static_cast<std::size_t>(b)] == want.bonus_token);
      CHECK(static_cast<std::uint64_t>(got_used[static_cast<std::size_t>(b)]) == rng.offset() - offset);
      ++cases;
      deep += want.accepted_nodes.size() >= 2;
      rejected_all += t.tree.num_children(want.accepted_nodes.empty() ? -1 : want.accepted_nodes.back()) > 0;
    }
  }
  CHECK(cases > 700);
  CHECK(deep > 50);           // paths went deep
  CHECK(rejected_all > 200);  // and many ended in a residual draw
}
