// specdec::cuda::traversal_verification against the host row function it is
// built on: for the same trees, seed and offset, the device must emit exactly
// the path and token of row_math::traversal_verification_row over the same
// row_math::FlatTree with PhiloxUniforms{seed, b, offset} for batch row b
// (what the host rule TraversalVerification draws from RandomStream(seed, b,
// offset)). Without a device the [cuda] tests WARN and pass.
#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "device_support.hpp"
#include "specdec/accept/sequence_row_math.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/status.hpp"
#include "specdec/cuda/traversal_verification.hpp"
#include "support/catch.hpp"
#include "support/random_tree.hpp"

namespace {

using specdec::Status;
using specdec::TokenId;
using specdec::testing::DeviceBuffer;

// `batch` random trees of exactly `nodes` nodes each (the kernel's rows share
// one node count), flattened row after row.
struct Batch {
  std::vector<std::int32_t> parents;
  std::vector<TokenId> tokens;
  std::vector<std::uint8_t> draws;
  std::vector<float> draft, target;
  std::vector<specdec::testing::RandomTree> trees;
  std::int32_t max_depth = 0;
};

Batch make_batch(std::mt19937& gen, std::int32_t batch, std::int32_t nodes, std::int64_t vocab) {
  Batch out;
  while (static_cast<std::int32_t>(out.trees.size()) < batch) {
    auto t = specdec::testing::random_tree(gen, vocab, nodes);
    if (t.tree.size() != nodes) continue;
    out.max_depth = std::max(out.max_depth, t.tree.max_depth());
    out.parents.insert(out.parents.end(), t.parents.begin(), t.parents.end());
    out.tokens.insert(out.tokens.end(), t.tokens.begin(), t.tokens.end());
    out.draws.insert(out.draws.end(), t.draws.begin(), t.draws.end());
    out.draft.insert(out.draft.end(), t.draft_rows.begin(), t.draft_rows.end());
    out.target.insert(out.target.end(), t.target_rows.begin(), t.target_rows.end());
    out.trees.push_back(std::move(t));
  }
  return out;
}

// The kernel's outputs for a batch (device memory in, host copies out).
struct DeviceRun {
  std::vector<std::int32_t> path, count;
  std::vector<TokenId> emitted;
};

DeviceRun run_device(const Batch& in, std::int32_t batch, std::int32_t nodes, std::int64_t vocab,
                     std::uint64_t seed, std::uint64_t offset) {
  const DeviceBuffer<std::int32_t> parents(in.parents);
  const DeviceBuffer<TokenId> tokens(in.tokens);
  const DeviceBuffer<std::uint8_t> draws(in.draws);
  const DeviceBuffer<float> draft(in.draft), target(in.target);
  // Filled with a value the kernel never writes, so an unwritten slot shows.
  const DeviceBuffer<std::int32_t> path(
      std::vector<std::int32_t>(static_cast<std::size_t>(batch * in.max_depth), -7));
  const DeviceBuffer<std::int32_t> count(std::vector<std::int32_t>(static_cast<std::size_t>(batch), -7));
  const DeviceBuffer<TokenId> emitted(std::vector<TokenId>(static_cast<std::size_t>(batch), -7));
  const auto bytes = specdec::cuda::traversal_verification_workspace_bytes(batch, in.max_depth, vocab);
  const DeviceBuffer<char> workspace{std::vector<char>(bytes)};
  const Status s = specdec::cuda::traversal_verification(
      parents.get(), tokens.get(), draws.get(), draft.get(), target.get(), nullptr, path.get(), count.get(),
      emitted.get(), batch, nodes, in.max_depth, vocab, workspace.get(), bytes, seed, offset);
  REQUIRE(std::string(specdec::status_string(s)) == "ok");
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  return {path.to_host(), count.to_host(), emitted.to_host()};
}

}  // namespace

TEST_CASE("cuda::traversal_verification rejects bad arguments before touching a device", "[unit]") {
  using specdec::cuda::traversal_verification;
  std::int32_t ints[4] = {};
  TokenId ids[4] = {};
  std::uint8_t draws[4] = {};
  float probs[8] = {};
  char workspace[4096];
  const auto call = [&](std::int32_t batch, std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab,
                        std::size_t bytes, void* ws = nullptr, const float* target = nullptr) {
    return traversal_verification(ints, ids, draws, probs, target == nullptr ? probs : target, nullptr, ints,
                                  ints, ids, batch, nodes, max_depth, vocab, ws == nullptr ? workspace : ws,
                                  bytes, 1, 0);
  };
  const auto kInvalid = Status::kInvalidArgument;
  CHECK(call(-1, 1, 1, 2, 4096) == kInvalid);
  CHECK(call(1, -1, 0, 2, 4096) == kInvalid);
  CHECK(call(1, 1, 2, 2, 4096) == kInvalid);  // deeper than the nodes allow
  CHECK(call(1, 1, 1, 0, 4096) == kInvalid);
  CHECK(call(1, 1, 1, std::int64_t{1} << 31, 4096) == kInvalid);
  CHECK(call(1, 3, 3, 2, 8) == kInvalid);  // short workspace
  CHECK(traversal_verification(ints, ids, nullptr, probs, probs, nullptr, ints, ints, ids, 1, 1, 1, 2,
                               workspace, 4096, 1, 0) == kInvalid);
  CHECK(traversal_verification(ints, ids, draws, probs, nullptr, nullptr, ints, ints, ids, 1, 1, 1, 2,
                               workspace, 4096, 1, 0) == kInvalid);
  CHECK(traversal_verification(ints, ids, draws, probs, probs, nullptr, nullptr, ints, ids, 1, 1, 1, 2,
                               workspace, 4096, 1, 0) == kInvalid);
  CHECK(traversal_verification(ints, ids, draws, probs, probs, nullptr, ints, ints, ids, 1, 1, 1, 2, nullptr,
                               4096, 1, 0) == kInvalid);
  CHECK(call(0, 5, 3, 10, 0) == Status::kOk);  // an empty batch launches nothing

  using specdec::cuda::traversal_verification_workspace_bytes;
  const auto one = traversal_verification_workspace_bytes(1, 3, 1000);
  CHECK(one >= 4 * 2 * 1000 * sizeof(double));
  CHECK(traversal_verification_workspace_bytes(5, 3, 1000) == 5 * one);
  CHECK(traversal_verification_workspace_bytes(-1, 3, 1000) == 0);
  CHECK(traversal_verification_workspace_bytes(1, 3, 0) == 0);
  CHECK(traversal_verification_workspace_bytes(1 << 30, 1 << 20, 1 << 30) == 0);  // overflows
}

TEST_CASE("cuda::traversal_verification emits exactly the host row function's path and token", "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  std::mt19937 gen(20261125);
  std::int64_t accepted = 0, rejections = 0;
  for (const std::int64_t vocab : {std::int64_t{1000}, std::int64_t{32000}, std::int64_t{128256}}) {
    const std::int32_t batch = vocab == 1000 ? 200 : vocab == 32000 ? 20 : 6;
    for (const std::int32_t nodes : {1, 4, 12}) {
      const Batch in = make_batch(gen, batch, nodes, vocab);
      const std::uint64_t seed = 77 + static_cast<std::uint64_t>(nodes), offset = 5;
      CAPTURE(vocab, nodes, in.max_depth);
      const DeviceRun device = run_device(in, batch, nodes, vocab, seed, offset);
      const auto& device_path = device.path;
      const auto& device_count = device.count;
      const auto& device_emitted = device.emitted;
      for (std::int32_t b = 0; b < batch; ++b) {
        CAPTURE(b);
        const auto& t = in.trees[static_cast<std::size_t>(b)];
        const auto levels = static_cast<std::size_t>(t.tree.max_depth()) + 1;
        std::vector<specdec::row_math::TraversalLevel> level(levels);
        std::vector<double> scratch(2 * levels * static_cast<std::size_t>(vocab));
        std::vector<std::int32_t> host_path(levels, -1);
        TokenId host_emitted = specdec::kNoToken;
        const auto k = specdec::row_math::traversal_verification_row(
            t.flat(vocab), specdec::row_math::StridedRows{t.target_rows.data(), vocab}, vocab,
            specdec::PhiloxUniforms{seed, static_cast<std::uint64_t>(b), offset}, level.data(),
            scratch.data(), host_path.data(), &host_emitted);
        REQUIRE(device_count[static_cast<std::size_t>(b)] == k);
        REQUIRE(device_emitted[static_cast<std::size_t>(b)] == host_emitted);
        for (std::int32_t j = 0; j < in.max_depth; ++j)
          REQUIRE(device_path[static_cast<std::size_t>(b * in.max_depth + j)] ==
                  (j < k ? host_path[static_cast<std::size_t>(j)] : -1));
        accepted += k;
        rejections += k < t.tree.max_depth();
      }
    }
  }
  CHECK(accepted > 0);
  CHECK(rejections > 0);
}

TEST_CASE("cuda::traversal_verification flags rows it cannot walk", "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  std::mt19937 gen(3);
  const std::int32_t batch = 3, nodes = 4;
  const std::int64_t vocab = 100;
  Batch in = make_batch(gen, batch, nodes, vocab);
  in.tokens[1 * nodes + 2] = static_cast<TokenId>(vocab);  // row 1: a token outside the vocabulary
  in.parents[2 * nodes + 1] = 3;                           // row 2: a parent after its child
  const DeviceRun device = run_device(in, batch, nodes, vocab, 9, 0);
  const auto& c = device.count;
  const auto& e = device.emitted;
  CHECK(c[0] >= 0);
  CHECK(e[0] != specdec::kNoToken);
  for (std::size_t b = 1; b < 3; ++b) {
    CAPTURE(b);
    CHECK(c[b] == -1);
    CHECK(e[b] == specdec::kNoToken);
  }
}
