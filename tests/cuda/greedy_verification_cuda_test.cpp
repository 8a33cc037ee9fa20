// specdec::cuda::greedy_verification against the host rule GreedyAcceptance:
// for the same trees and target rows the device must accept the same path and
// emit the same token, for trees of different sizes in one launch. Without a
// device the [cuda] tests WARN and pass.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "device_support.hpp"
#include "specdec/accept/greedy.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/status.hpp"
#include "specdec/cuda/greedy_verification.hpp"
#include "support/catch.hpp"
#include "support/random_tree.hpp"

namespace {

using specdec::Status;
using specdec::TokenId;
using specdec::testing::DeviceBuffer;

// Trees of up to `nodes` nodes padded to `nodes`; target rows are random
// logits in which, for about two thirds of the nodes, the node's token is
// planted as its slot's argmax (sometimes tied with a lower token id, which
// must then win), so that paths are accepted to every depth.
struct Batch {
  std::vector<std::int32_t> parents, sizes;
  std::vector<TokenId> tokens;
  std::vector<float> rows;  // [batch, nodes + 1, vocab]
  std::vector<specdec::DraftTree> trees;
  std::int32_t max_depth = 0;
};

Batch make_batch(std::mt19937& gen, std::int32_t batch, std::int32_t nodes, std::int64_t vocab) {
  Batch out;
  const auto v = static_cast<std::size_t>(vocab);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (std::int32_t b = 0; b < batch; ++b) {
    auto t = specdec::testing::random_tree(gen, std::min<std::int64_t>(vocab, 50), nodes);
    const std::int32_t n = t.tree.size();
    out.max_depth = std::max(out.max_depth, t.tree.max_depth());
    out.sizes.push_back(n);
    std::vector<float> rows(static_cast<std::size_t>(nodes + 1) * v, std::numeric_limits<float>::quiet_NaN());
    for (std::int32_t r = 0; r <= n; ++r)
      for (std::size_t k = 0; k < v; ++k) rows[static_cast<std::size_t>(r) * v + k] = normal(gen);
    for (std::int32_t i = 0; i < n; ++i) {
      if (gen() % 3 == 0) continue;
      float* row = rows.data() + static_cast<std::size_t>(t.parents[static_cast<std::size_t>(i)] + 1) * v;
      const float top = *std::max_element(row, row + vocab) + 1.0f;
      const TokenId x = t.tokens[static_cast<std::size_t>(i)];
      row[x] = top;
      if (x > 0 && gen() % 4 == 0)
        row[gen() % static_cast<std::uint64_t>(x)] = top;  // a lower id ties: it wins
    }
    t.parents.resize(static_cast<std::size_t>(nodes), -1);  // padding, never read
    t.tokens.resize(static_cast<std::size_t>(nodes), 0);
    out.parents.insert(out.parents.end(), t.parents.begin(), t.parents.end());
    out.tokens.insert(out.tokens.end(), t.tokens.begin(), t.tokens.end());
    out.rows.insert(out.rows.end(), rows.begin(), rows.end());
    out.trees.push_back(std::move(t.tree));
  }
  return out;
}

}  // namespace

TEST_CASE("cuda::greedy_verification rejects bad arguments before touching a device", "[unit]") {
  using specdec::cuda::greedy_verification;
  std::int32_t ints[4] = {};
  TokenId ids[4] = {};
  float rows[8] = {};
  const std::size_t need = specdec::cuda::greedy_verification_workspace_bytes(1, 1);
  REQUIRE(need > 0);
  std::vector<std::max_align_t> storage(need / sizeof(std::max_align_t) + 2);  // 16-byte aligned
  char* ws = reinterpret_cast<char*>(storage.data());
  const auto call = [&](std::int32_t batch, std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab) {
    return greedy_verification(rows, ints, ids, nullptr, ints, ints, ids, batch, nodes, max_depth, vocab, ws,
                               4 * need);
  };
  CHECK(call(-1, 1, 1, 2) == Status::kInvalidArgument);
  CHECK(call(1, -1, 0, 2) == Status::kInvalidArgument);
  CHECK(call(1, 1, 2, 2) == Status::kInvalidArgument);
  CHECK(call(1, 1, 1, 0) == Status::kInvalidArgument);
  CHECK(call(1, 1, 1, std::int64_t{1} << 31) == Status::kInvalidArgument);
  CHECK(call(65536, 0, 0, 2) == Status::kInvalidArgument);   // more trees than counters
  CHECK(call(2, 32767, 0, 2) == Status::kInvalidArgument);   // 65536 rows
  CHECK(greedy_verification(nullptr, ints, ids, nullptr, ints, ints, ids, 1, 1, 1, 2, ws, need) ==
        Status::kInvalidArgument);
  CHECK(greedy_verification(rows, ints, ids, nullptr, ints, ints, ids, 1, 1, 1, 2, nullptr, need) ==
        Status::kInvalidArgument);
  CHECK(greedy_verification(rows, ints, ids, nullptr, ints, ints, ids, 1, 1, 1, 2, ws + 8, need) ==
        Status::kInvalidArgument);  // misaligned
  CHECK(greedy_verification(rows, ints, ids, nullptr, ints, ints, ids, 1, 1, 1, 2, ws, need - 1) ==
        Status::kInvalidArgument);
  CHECK(specdec::cuda::greedy_verification_workspace_bytes(2, 32767) == 0);
  CHECK(call(0, 1, 1, 2) == Status::kOk);
}

TEST_CASE(
    "cuda::greedy_verification accepts exactly the host rule's path, trees of mixed sizes in one launch",
    "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  std::mt19937 gen(37);
  int deep = 0, cases = 0;
  // One workspace, zeroed once, for every launch: the kernel leaves it zeroed.
  const std::size_t ws_bytes = specdec::cuda::greedy_verification_workspace_bytes(200, 12);
  const DeviceBuffer<char> workspace(std::vector<char>(ws_bytes, 0));
  for (const std::int64_t vocab :
       {std::int64_t{50}, std::int64_t{8192}, std::int64_t{32000}, std::int64_t{128256}}) {
    const std::int32_t batch = vocab >= 32000 ? 8 : 200, nodes = 12;
    const Batch in = make_batch(gen, batch, nodes, vocab);
    const DeviceBuffer<float> rows(in.rows);
    const DeviceBuffer<std::int32_t> parents(in.parents), sizes(in.sizes);
    const DeviceBuffer<TokenId> tokens(in.tokens);
    const DeviceBuffer<std::int32_t> path(
        std::vector<std::int32_t>(static_cast<std::size_t>(batch) * in.max_depth, -7));
    const DeviceBuffer<std::int32_t> count(std::vector<std::int32_t>(static_cast<std::size_t>(batch), -7));
    const DeviceBuffer<TokenId> emitted(std::vector<TokenId>(static_cast<std::size_t>(batch), -7));
    const Status s = specdec::cuda::greedy_verification(rows.get(), parents.get(), tokens.get(), sizes.get(),
                                                        path.get(), count.get(), emitted.get(), batch, nodes,
                                                        in.max_depth, vocab, workspace.get(), ws_bytes);
    REQUIRE(std::string(specdec::status_string(s)) == "ok");
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const auto got_path = path.to_host();
    const auto got_count = count.to_host();
    const auto got_emitted = emitted.to_host();
    specdec::GreedyAcceptance rule;
    specdec::RandomStream rng(1);
    for (std::int32_t b = 0; b < batch; ++b) {
      const auto& tree = in.trees[static_cast<std::size_t>(b)];
      const specdec::ProbRows target(
          in.rows.data() + static_cast<std::size_t>(b) * (nodes + 1) * static_cast<std::size_t>(vocab),
          tree.size() + 1, vocab);
      const auto want = rule.verify(tree, target, {}, rng);
      INFO("vocab " << vocab << ", tree " << b << " of " << tree.size() << " nodes");
      REQUIRE(got_count[static_cast<std::size_t>(b)] ==
              static_cast<std::int32_t>(want.accepted_nodes.size()));
      for (std::size_t k = 0; k < want.accepted_nodes.size(); ++k)
        CHECK(got_path[static_cast<std::size_t>(b) * in.max_depth + k] == want.accepted_nodes[k]);
      for (std::size_t k = want.accepted_nodes.size(); k < static_cast<std::size_t>(in.max_depth); ++k)
        CHECK(got_path[static_cast<std::size_t>(b) * in.max_depth + k] == -1);
      CHECK(got_emitted[static_cast<std::size_t>(b)] == want.bonus_token);
      deep += want.accepted_nodes.size() >= 2;
      ++cases;
    }
  }
  CHECK(cases > 400);
  CHECK(deep > 30);  // paths really went deep
}
