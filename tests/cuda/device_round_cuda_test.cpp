// cuda::DeviceRound against the host path: the same logits warped by the
// host Warper with each request's sampling, then the host rule drawing from
// the request's own RandomStream, must give every tree the same path, token,
// depth_accepted and uniforms used, in batches that mix greedy and sampled
// requests, tree sizes and child modes, with draft rows in any order of the
// drafter's (DraftTree::children_draft_row), on the host or on the device.
// Without a device the [cuda] tests WARN and pass; the argument checks run
// anywhere.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "device_support.hpp"
#include "specdec/accept/block_verification.hpp"
#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/accept/speculative_sampling.hpp"
#include "specdec/accept/traversal_verification.hpp"
#include "specdec/accept/typical_acceptance.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/warp.hpp"
#include "specdec/cuda/device_round.hpp"
#include "support/catch.hpp"
#include "support/random_tree.hpp"

namespace sd = specdec;
using sd::cuda::DeviceRule;

namespace {

sd::SamplingParams random_sampling(std::mt19937& gen, bool greedy_only) {
  sd::SamplingParams p;
  switch (greedy_only ? 0 : gen() % 4) {
    case 0:
      p.temperature = 0.0f;
      break;
    case 1:
      p.temperature = 1.0f;
      break;
    case 2:
      p.temperature = 0.7f;
      p.top_k = 10;
      break;
    default:
      p.temperature = 1.0f;
      p.top_p = 0.9f;
      break;
  }
  return p;
}

struct Round {
  std::vector<sd::testing::RandomTree> trees;
  std::vector<sd::cuda::DeviceRoundItem> items;
  std::vector<float> logits;  // the forward's rows, item after item
};

// Moves a tree's draft rows to random rows of its draft matrix, as a
// drafter that appends rows in its own order leaves them, and points the
// tree's sampled slots at them.
void shuffle_draft_rows(std::mt19937& gen, sd::testing::RandomTree& t, std::int64_t vocab) {
  const std::int32_t n = t.tree.size() + 1;
  std::vector<std::int32_t> to(static_cast<std::size_t>(n));
  std::iota(to.begin(), to.end(), 0);
  std::shuffle(to.begin(), to.end(), gen);
  sd::ProbMatrix moved(n, vocab);
  for (std::int32_t slot = sd::DraftTree::kRoot; slot + 1 < n; ++slot) {
    const auto from = t.draft_matrix.view().row(slot + 1);
    std::copy(from.begin(), from.end(), moved.row(to[static_cast<std::size_t>(slot + 1)]).begin());
    const auto mode = t.tree.children_mode(slot);
    if (mode != sd::ChildMode::kDeterministic)
      t.tree.set_children_source(slot, to[static_cast<std::size_t>(slot + 1)], mode);
  }
  t.draft_matrix = std::move(moved);
}

// `batch` random trees (chains with `chains`) of up to `nodes` nodes, each
// request its own sampling and stream, half of them with their draft rows
// shuffled. A third of the rows' logits are the log of the slot's draft row,
// so sampled drafts are often accepted and paths go deep; the rest are
// random.
Round make_round(std::mt19937& gen, std::int32_t batch, std::int32_t nodes, std::int64_t vocab,
                 bool greedy_only, bool chains) {
  Round r;
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const auto v = static_cast<std::size_t>(vocab);
  while (static_cast<std::int32_t>(r.trees.size()) < batch) {
    auto t = sd::testing::random_tree(gen, vocab, nodes, chains);
    if (gen() % 2 == 0) shuffle_draft_rows(gen, t, vocab);
    r.trees.push_back(std::move(t));
  }
  for (std::int32_t b = 0; b < batch; ++b) {
    const auto& t = r.trees[static_cast<std::size_t>(b)];
    const std::uint64_t seed = gen(), stream = gen() % 1000, offset = gen() % 50;
    r.items.push_back({&t.tree, random_sampling(gen, greedy_only), {seed, stream, offset}});
    for (std::int32_t row = 0; row <= t.tree.size(); ++row) {
      const bool like_draft = gen() % 3 == 0;
      for (std::size_t i = 0; i < v; ++i)
        r.logits.push_back(like_draft ? std::log(t.draft_rows[static_cast<std::size_t>(row) * v + i])
                                      : normal(gen));
    }
  }
  return r;
}

// The host path of one item: its rows warped with its sampling, the rule
// drawing from its stream. Returns the uniforms used.
std::int32_t host_verify(DeviceRule rule, const Round& r, std::size_t b, std::int64_t first_row,
                         std::int64_t vocab, sd::VerifyResult& out) {
  const auto& t = r.trees[b];
  const auto& item = r.items[b];
  const std::int64_t n = t.tree.size() + 1;
  sd::ProbMatrix rows(n, vocab);
  sd::Warper warp;
  for (std::int64_t i = 0; i < n; ++i)
    warp(std::span(r.logits).subspan(static_cast<std::size_t>((first_row + i) * vocab),
                                     static_cast<std::size_t>(vocab)),
         item.sampling, rows.row(i));
  sd::RandomStream rng(item.stream.seed, item.stream.stream, item.stream.offset);
  switch (rule) {
    case DeviceRule::kGreedy:
      out = sd::GreedyAcceptance{}.verify(t.tree, rows.view(), t.draft_matrix.view(), rng);
      break;
    case DeviceRule::kRecursiveRejection:
      out = sd::RecursiveRejectionSampling{}.verify(t.tree, rows.view(), t.draft_matrix.view(), rng);
      break;
    case DeviceRule::kTraversal:
      out = sd::TraversalVerification{}.verify(t.tree, rows.view(), t.draft_matrix.view(), rng);
      break;
    case DeviceRule::kTypical:
      out = sd::TypicalAcceptance{}.verify(t.tree, rows.view(), t.draft_matrix.view(), rng);
      break;
    case DeviceRule::kSpeculative:
      out = sd::SpeculativeSampling{}.verify(t.tree, rows.view(), t.draft_matrix.view(), rng);
      break;
    case DeviceRule::kBlock:
      out = sd::BlockVerification{}.verify(t.tree, rows.view(), t.draft_matrix.view(), rng);
      break;
  }
  return static_cast<std::int32_t>(rng.offset() - item.stream.offset);
}

}  // namespace

TEST_CASE("DeviceRound refuses a round it was not given the buffers for", "[unit]") {
  sd::cuda::DeviceRound round;
  sd::DraftTree tree;
  tree.clear(0);
  tree.add_node(sd::DraftTree::kRoot, 1, 1.0f);
  const std::vector<sd::cuda::DeviceRoundItem> items = {{&tree, {}, {}}};
  const sd::cuda::DeviceRoundLayout layout(items);
  std::vector<sd::VerifyResult> out(1);
  std::vector<std::int32_t> used(1);
  // Results for two trees of a batch of one.
  std::vector<sd::VerifyResult> two(2);
  CHECK_THROWS_AS(round.verify(layout, DeviceRule::kRecursiveRejection, 8, false, two, used),
                  sd::InvalidArgumentError);
  // No logits() yet.
  CHECK_THROWS_AS(round.verify(layout, DeviceRule::kRecursiveRejection, 8, false, out, used),
                  sd::InvalidArgumentError);
  CHECK_THROWS_AS(round.logits(-1, 8), sd::InvalidArgumentError);
  CHECK_THROWS_AS(round.draft_rows(2, 0), sd::InvalidArgumentError);

  // A sampled slot whose draft row the drafter did not give, or of another
  // vocabulary (checked before any device memory is touched).
  sd::DraftTree drawn;
  drawn.clear(0);
  drawn.set_children_source(sd::DraftTree::kRoot, 2, sd::ChildMode::kSampledWithReplacement);
  drawn.add_node(sd::DraftTree::kRoot, 1, 0.5f);
  const std::vector<sd::cuda::DeviceRoundItem> drawn_items = {{&drawn, {}, {}}};
  const sd::cuda::DeviceRoundLayout drawn_layout(drawn_items);
  sd::ProbMatrix two_rows(2, 8), three_rows(3, 4);
  const std::vector<sd::ProbRows> short_rows = {two_rows.view()}, narrow_rows = {three_rows.view()};
  CHECK_THROWS_AS(round.set_draft_rows(drawn_layout, short_rows, 8), sd::ShapeError);
  CHECK_THROWS_AS(round.set_draft_rows(drawn_layout, narrow_rows, 8), sd::ShapeError);
  CHECK_THROWS_AS(round.set_draft_rows(drawn_layout, {}, 8), sd::ShapeError);
}

TEST_CASE("DeviceRound emits the host path's tokens and uniforms for every rule, mixed requests in one batch",
          "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  std::mt19937 gen(2029);
  struct Size {
    std::int64_t vocab;
    std::int32_t batch, nodes;
  };
  // Under compute-sanitizer (scripts/gpu-check.sh sets SPECDEC_CUDA_QUICK):
  // the two smallest vocabularies and the largest only.
  const bool quick = std::getenv("SPECDEC_CUDA_QUICK") != nullptr;
  int cases = 0, deep = 0, sampled = 0, device_rows = 0;
  for (const DeviceRule rule : {DeviceRule::kRecursiveRejection, DeviceRule::kGreedy, DeviceRule::kTypical,
                                DeviceRule::kTraversal, DeviceRule::kSpeculative, DeviceRule::kBlock}) {
    for (const Size size :
         {Size{3, 64, 5}, Size{50, 64, 8}, Size{8192, 24, 8}, Size{32000, 8, 6}, Size{128256, 3, 5}}) {
      if (quick && (size.vocab == 8192 || size.vocab == 32000)) continue;
      const bool chains = rule == DeviceRule::kSpeculative || rule == DeviceRule::kBlock;
      Round r = make_round(gen, size.batch, size.nodes, size.vocab, rule == DeviceRule::kGreedy, chains);
      const sd::cuda::DeviceRoundLayout layout(r.items);
      sd::cuda::DeviceRound round;
      float* logits = round.logits(layout.forward_rows(), size.vocab);
      REQUIRE(cudaMemcpy(logits, r.logits.data(), r.logits.size() * sizeof(float), cudaMemcpyHostToDevice) ==
              cudaSuccess);
      // The drafters' rows, as the engine hands them over: in host memory, or
      // (at vocabulary 50) in device memory, as a drafter on the device keeps
      // them.
      std::vector<sd::ProbRows> rows;
      std::vector<std::unique_ptr<sd::testing::DeviceBuffer<float>>> on_device;
      for (const auto& t : r.trees) {
        const sd::ProbRows host = t.draft_matrix.view();
        if (size.vocab != 50) {
          rows.push_back(host);
          continue;
        }
        on_device.push_back(std::make_unique<sd::testing::DeviceBuffer<float>>(
            std::vector<float>(host.data(), host.data() + host.num_rows() * host.row_stride())));
        rows.emplace_back(on_device.back()->get(), host.num_rows(), host.vocab(), host.row_stride());
        ++device_rows;
      }
      round.set_draft_rows(layout, rows, size.vocab);
      std::vector<sd::VerifyResult> got(static_cast<std::size_t>(layout.batch()));
      std::vector<std::int32_t> used(got.size());
      round.verify(layout, rule, size.vocab, true, got, used);
      for (std::int32_t b = 0; b < layout.batch(); ++b) {
        sd::VerifyResult want;
        const std::int32_t want_used =
            host_verify(rule, r, static_cast<std::size_t>(b), layout.first_row(b), size.vocab, want);
        INFO(sd::cuda::device_rule_name(rule)
             << ", vocab " << size.vocab << ", tree " << b << " of "
             << r.trees[static_cast<std::size_t>(b)].tree.size() << " nodes");
        CHECK(got[static_cast<std::size_t>(b)].accepted_nodes == want.accepted_nodes);
        CHECK(got[static_cast<std::size_t>(b)].bonus_token == want.bonus_token);
        CHECK(got[static_cast<std::size_t>(b)].depth_accepted == want.depth_accepted);
        CHECK(used[static_cast<std::size_t>(b)] == want_used);
        ++cases;
        deep += want.accepted_nodes.size() >= 2;
        sampled += !r.items[static_cast<std::size_t>(b)].sampling.is_greedy();
      }
    }
  }
  CHECK(cases > (quick ? 450 : 600));
  CHECK(deep > 60);
  CHECK(sampled > 150);
  CHECK(device_rows > 100);
}

TEST_CASE("DeviceRound refuses the greedy rule on a sampled request and a row it cannot warp", "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  sd::DraftTree tree;
  tree.clear(0);
  tree.add_node(sd::DraftTree::kRoot, 1, 1.0f);
  sd::SamplingParams sampled;
  const std::vector<sd::cuda::DeviceRoundItem> items = {{&tree, sampled, {}}};
  const sd::cuda::DeviceRoundLayout layout(items);
  sd::cuda::DeviceRound round;
  float* logits = round.logits(2, 4);
  std::vector<float> rows = {0.0f, 1.0f, 2.0f, 3.0f, 0.0f, NAN, 1.0f, 1.0f};
  REQUIRE(cudaMemcpy(logits, rows.data(), rows.size() * sizeof(float), cudaMemcpyHostToDevice) ==
          cudaSuccess);
  std::vector<sd::VerifyResult> out(1);
  std::vector<std::int32_t> used(1);
  CHECK_THROWS_AS(round.verify(layout, DeviceRule::kGreedy, 4, false, out, used), sd::InvalidArgumentError);
  CHECK_THROWS_AS(round.verify(layout, DeviceRule::kTypical, 4, false, out, used),
                  sd::InvalidDistributionError);
  // Sampled children need draft rows.
  sd::DraftTree drawn;
  drawn.clear(0);
  drawn.set_children_source(sd::DraftTree::kRoot, 0, sd::ChildMode::kSampledWithReplacement);
  drawn.add_node(sd::DraftTree::kRoot, 1, 0.5f);
  const std::vector<sd::cuda::DeviceRoundItem> drawn_items = {{&drawn, sampled, {}}};
  const sd::cuda::DeviceRoundLayout drawn_layout(drawn_items);
  CHECK_THROWS_AS(round.verify(drawn_layout, DeviceRule::kRecursiveRejection, 4, false, out, used),
                  sd::InvalidArgumentError);
  // The chain rules verify chains only.
  sd::DraftTree forked;
  forked.clear(0);
  forked.add_node(sd::DraftTree::kRoot, 1, 1.0f);
  forked.add_node(sd::DraftTree::kRoot, 2, 1.0f);
  const std::vector<sd::cuda::DeviceRoundItem> forked_items = {{&forked, {}, {}}};
  const sd::cuda::DeviceRoundLayout forked_layout(forked_items);
  float* forked_logits = round.logits(3, 4);
  std::vector<float> three(12, 0.0f);
  REQUIRE(cudaMemcpy(forked_logits, three.data(), three.size() * sizeof(float), cudaMemcpyHostToDevice) ==
          cudaSuccess);
  for (const DeviceRule rule : {DeviceRule::kSpeculative, DeviceRule::kBlock})
    CHECK_THROWS_AS(round.verify(forked_layout, rule, 4, false, out, used), sd::InvalidTreeError);
}
