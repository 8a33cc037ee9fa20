// examples/host_engine, an engine that is not ours (its own Model without
// libtorch, its own cache and its own Lyanna head): its parts against the
// libtorch ones. Its methods, decoding concurrent requests, are
// host_engine_methods_test.cpp.
#include <cmath>
#include <filesystem>
#include <vector>

#include "../../examples/host_engine/host_llama.hpp"
#include "../../examples/host_engine/host_lyanna_head.hpp"
#include "specdec/torch/draft_head.hpp"
#include "specdec/torch/llama_model.hpp"
#include "support/catch.hpp"
#include "support/reference_llama.hpp"
#include "support/sink_window_schedule.hpp"

namespace sd = specdec;
namespace tb = specdec::torch_backend;

TEST_CASE("The host engine's own Llama model matches the libtorch model's logits", "[torch][host_engine]") {
  const std::filesystem::path models = SPECDEC_SOURCE_DIR "/models";
  host_engine::HostLlama host(models / "target");
  auto reference = tb::LlamaModel::load(models / "target");
  const std::vector<sd::TokenId> tokens = {1, 300, 41, 7, 2048, 13, 500, 9};
  std::vector<std::int64_t> positions(tokens.size());
  for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<std::int64_t>(i);
  host.open(0);
  const sd::SequenceInput in{0, tokens, positions};
  sd::HostRows rows;
  sd::ForwardRequest request{std::span(&in, 1)};
  request.logits = rows.view(static_cast<std::int64_t>(tokens.size()), host.vocab_size());
  host.forward(request);
  const auto ref = reference.forward_train(at::tensor(std::vector<std::int64_t>(tokens.begin(), tokens.end()), at::kLong)
                                               .unsqueeze(0))
                       .squeeze(0)
                       .contiguous();
  const float* got = request.logits.data_as<float>();
  double worst = 0.0, scale = 0.0;
  for (std::int64_t i = 0; i < ref.numel(); ++i) {
    worst = std::max(worst, std::abs(double(got[i]) - double(ref.data_ptr<float>()[i])));
    scale = std::max(scale, std::abs(double(ref.data_ptr<float>()[i])));
  }
  CHECK(worst / scale < 1e-4);
}

TEST_CASE("The host engine's own Llama model keeps a sink + window cache as the StreamingLLM mask says",
          "[torch][host_engine][sparse]") {
  using Positions = sd::CachePolicy::Positions;
  const auto positions = GENERATE(Positions::kText, Positions::kCache);
  CAPTURE(positions == Positions::kCache);
  const sd::testing::ReferenceLlama ref(sd::testing::tiny_llama_config(32, 48, 2), 5, false);
  const auto dir = std::filesystem::temp_directory_path() / "specdec_host_sink";
  std::filesystem::remove_all(dir);
  ref.save(dir);
  host_engine::HostLlama host(dir);
  const std::int64_t sink = 3, window = 10;
  host.open(0, sd::CachePolicy::sink_window(sink, window, positions));
  const auto run = sd::testing::run_sink_window_schedule(host, 17, [] {});
  CHECK(sd::testing::worst_row_error(run, ref.all_logits(run.context, run.committed, sink, window,
                                                         positions == Positions::kCache)) < 1e-4);
  CHECK_THROWS_AS(host.rollback(0, static_cast<std::int64_t>(run.context.size()) - 1), sd::InvalidArgumentError);
}

TEST_CASE("The host engine's own Lyanna head drafts what the libtorch head drafts", "[torch][host_engine]") {
  const std::filesystem::path models = SPECDEC_SOURCE_DIR "/models";
  const host_engine::HostLlama host_target(models / "target");
  host_engine::HostLyannaHead host(models / "lyanna", host_target);
  auto target = tb::LlamaModel::load(models / "target");
  auto head = tb::DraftHead::load(models / "lyanna", target);
  const auto d = head.hidden_size(), v = head.vocab_size();
  // The same committed entries (arbitrary states, real tokens), then a chain.
  const std::vector<sd::TokenId> tokens = {300, 41, 7, 2048, 13};
  std::vector<float> states(tokens.size() * static_cast<std::size_t>(d));
  for (std::size_t i = 0; i < states.size(); ++i) states[i] = static_cast<float>(std::sin(0.37 * double(i)));
  std::vector<float> h1_host(static_cast<std::size_t>(d)), h1_torch(h1_host.size());
  host.reset();
  head.reset();
  host.advance(states, tokens, 1, h1_host);
  head.advance(states, tokens, 1, h1_torch);
  constexpr std::int64_t kSteps = 3;
  std::vector<float> chain_host(static_cast<std::size_t>(kSteps * d)), chain_torch(chain_host.size());
  host.chain(h1_host, kSteps, 5, chain_host);
  head.chain(h1_torch, kSteps, 5, chain_torch);
  // A second chain from the same h_1 (a builder asking for a level again)
  // starts afresh: it does not see what the first one staged.
  std::vector<float> again(chain_torch.size());
  head.chain(h1_torch, kSteps, 5, again);
  CHECK(again == chain_torch);
  std::vector<float> logits_host(static_cast<std::size_t>(kSteps * v)), logits_torch(logits_host.size());
  host.logits(chain_host, logits_host);
  head.logits(chain_torch, logits_torch);
  double worst = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < logits_host.size(); ++i) {
    worst = std::max(worst, std::abs(double(logits_host[i]) - double(logits_torch[i])));
    scale = std::max(scale, std::abs(double(logits_torch[i])));
  }
  CHECK(worst / scale < 1e-4);
  // The collapsed token-info tables agree too.
  REQUIRE(host.token_info().num_hot() == head.token_info().num_hot());
  for (const sd::TokenId parent : {sd::TokenId{13}, sd::TokenId{270}}) {
    const auto a = host.token_info().bias(parent), b = head.token_info().bias(parent);
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(std::abs(a[i] - b[i]) < 1e-4f * (1.0f + std::abs(b[i])));
  }
}
