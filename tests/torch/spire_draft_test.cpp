// SPIRe's draft model (torch/spire_draft.hpp): inference steps reproduce the
// training rollouts, the memory stays within sink + window, training learns
// and reaches the feedback memory's mixing weights, saved drafts load back,
// and `train-spire` resumes.
#include <ATen/ATen.h>
#include <torch/optim/adam.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/round.hpp"
#include "specdec/torch/llama_model.hpp"
#include "specdec/torch/spire_draft.hpp"
#include "specdec/torch/spire_trainer.hpp"
#include "support/catch.hpp"
#include "support/llama_fixtures.hpp"

namespace sd = specdec;
namespace st = specdec::testing;
namespace tb = specdec::torch_backend;

namespace {

at::Tensor token_window(std::initializer_list<std::int64_t> t) {
  return at::tensor(std::vector<std::int64_t>(t), at::kLong).view({1, static_cast<std::int64_t>(t.size())});
}

void randomise_mixing(tb::SpireDraft& draft, std::uint64_t seed) {
  at::NoGradGuard no_grad;
  const auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (auto& [name, t] : draft.named_parameters())
    if (name == "memory_mix") t.copy_(at::normal(0.0, 1.0, t.sizes(), gen));
}

// The target's memory rows for `tokens` from its Model forward: the outputs
// of the draft's memory layers, side by side.
std::vector<float> memory_rows(tb::LlamaModel& target, const tb::SpireDraft& draft, const std::vector<sd::TokenId>& tokens) {
  std::vector<std::int64_t> positions(tokens.size());
  for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<std::int64_t>(i);
  target.open(0);
  const auto n = static_cast<std::int64_t>(tokens.size()), width = draft.memory_layers() * target.hidden_size();
  std::vector<float> rows(static_cast<std::size_t>(n * width));
  const sd::SequenceInput in{0, tokens, positions};
  sd::ForwardRequest request{std::span(&in, 1)};
  request.hidden = sd::TensorView(rows.data(), sd::DType::kF32, {n, width});
  request.hidden_layer = draft.memory_layer();
  request.hidden_layers = draft.memory_layers();
  target.forward(request);
  target.close(0);
  return rows;
}

}  // namespace

TEST_CASE("A SPIRe draft's inference steps reproduce its training rollouts", "[torch][spire]") {
  auto target = tb::LlamaModel::random(st::tiny_decoding_config(3, 32), 7);
  const bool feedback = GENERATE(true, false);
  const std::int64_t window = GENERATE(3, 0);  // a window that evicts, and the dense ablation
  INFO("feedback " << feedback << ", window " << window);
  tb::SpireConfig config;
  config.layers = 2;
  config.first_layer = 1;
  config.sink = 1;
  config.window = window;
  config.feedback = feedback;
  auto draft = tb::SpireDraft::init(config, target, 1);
  randomise_mixing(draft, 5);
  const std::vector<sd::TokenId> tokens{5, 17, 3, 44, 9, 9, 21, 60, 2, 33, 7, 12};
  const auto window_tokens = token_window({5, 17, 3, 44, 9, 9, 21, 60, 2, 33, 7, 12});
  const std::int64_t k = 4, T = 12, V = target.vocab_size();
  const auto [logits, memory] = draft.target_inputs(target, window_tokens);
  const auto trained = draft.forward_train(window_tokens, memory, logits, k, 0.5, true);

  // The Model forward hands over the same activations as the training forward.
  const auto rows = memory_rows(target, draft, tokens);
  const auto width = static_cast<std::int64_t>(rows.size()) / T;
  REQUIRE(width == 2 * target.hidden_size());
  CHECK(at::allclose(at::tensor(rows).view({1, T, width}), memory, 1e-4, 1e-5));

  // Rollout b: remember the target's rows before b k, then draft b k .. b k + 3.
  std::vector<float> out(static_cast<std::size_t>(V));
  double worst = 0.0;
  for (std::int64_t b = 0; b < T / k; ++b) {
    draft.open(1);
    draft.remember(1, std::span<const float>(rows).first(static_cast<std::size_t>(b * k * width)), b * k);
    for (std::int64_t j = 0; j < k; ++j) {
      const auto t = b * k + j;
      const std::int32_t seq = 1;
      draft.step(std::span(&seq, 1), std::span(&tokens[static_cast<std::size_t>(t)], 1), std::span(&t, 1), out);
      const auto expected = trained.logits[0][t].contiguous();
      for (std::int64_t v = 0; v < V; ++v)
        worst = std::max(worst, std::abs(static_cast<double>(out[static_cast<std::size_t>(v)]) -
                                         expected[v].item<double>()));
    }
    draft.close(1);
  }
  CHECK(worst < 1e-4);
}

TEST_CASE("A SPIRe draft's memory stays within its sink and window", "[torch][spire]") {
  auto target = tb::LlamaModel::random(st::tiny_decoding_config(2, 32), 3);
  tb::SpireConfig config;
  config.layers = 1;
  config.first_layer = 1;
  config.sink = 2;
  config.window = 5;
  auto draft = tb::SpireDraft::init(config, target, 1);
  const auto width = target.hidden_size();
  std::vector<float> rows(static_cast<std::size_t>(7 * width), 0.25f);
  draft.open(3);
  std::int64_t peak = 0;
  for (int i = 0; i < 30; ++i) {  // 210 positions
    draft.remember(3, rows, 7);
    peak = std::max(peak, draft.memory_slots(3));
    // a staged step adds a slot until the next commit drops it
    const std::int32_t seq = 3;
    const sd::TokenId token = 4;
    const std::int64_t at = draft.committed(3);
    std::vector<float> logits(static_cast<std::size_t>(target.vocab_size()));
    draft.step(std::span(&seq, 1), std::span(&token, 1), std::span(&at, 1), logits);
    CHECK(draft.memory_slots(3) == config.sink + config.window + 1);
  }
  CHECK(draft.committed(3) == 210);
  CHECK(peak == config.sink + config.window);
  // A step at the wrong position, a sequence that is not open, a short row: typed errors.
  const std::int32_t seq = 3;
  const sd::TokenId token = 4;
  const std::int64_t wrong = 7;
  std::vector<float> logits(static_cast<std::size_t>(target.vocab_size()));
  CHECK_THROWS_AS(draft.step(std::span(&seq, 1), std::span(&token, 1), std::span(&wrong, 1), logits),
                  sd::InvalidArgumentError);
  CHECK_THROWS_AS(draft.remember(4, rows, 7), sd::InvalidArgumentError);
  CHECK_THROWS_AS(draft.remember(3, rows, 8), sd::ShapeError);
  config.first_layer = 0;  // the first draft layer's memory would be the embedding: not a target activation
  CHECK_THROWS_AS(tb::SpireDraft::init(config, target, 1), sd::InvalidArgumentError);
}

TEST_CASE("Training a SPIRe draft lowers its loss and reaches the feedback memory", "[torch][spire]") {
  auto target = tb::LlamaModel::random(st::tiny_training_config(32), 3);
  {  // a peaked target distribution (a random one is near uniform, which any draft matches)
    at::NoGradGuard no_grad;
    for (auto& [name, t] : target.named_parameters())
      if (name == "model.norm.weight") t.mul_(30.0);
  }
  tb::SpireConfig config;
  config.layers = 1;
  config.first_layer = 1;
  config.window = 6;
  config.pruned_init = false;  // far from the target at first: there is something to learn
  auto draft = tb::SpireDraft::init(config, target, 1);
  std::vector<std::int64_t> t(4 * 16);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int64_t>(10 + (i * 3 + i / 5) % 9);
  const auto tokens = at::tensor(t, at::kLong).view({4, 16});
  const auto [logits, memory] = draft.target_inputs(target, tokens);
  draft.set_requires_grad(true);
  torch::optim::Adam optimizer(draft.parameters(), torch::optim::AdamOptions(2e-2));
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 60; ++step) {
    optimizer.zero_grad();
    const auto out = draft.forward_train(tokens, memory, logits, 4, 0.5, true);
    out.loss.backward();
    if (step == 0) {
      first = out.loss.item<double>();
      for (auto& [name, p] : draft.named_parameters())
        if (name == "memory_mix") CHECK(p.grad().abs().sum().item<double>() > 0.0);
    }
    last = out.loss.item<double>();
    optimizer.step();
  }
  INFO("loss " << first << " -> " << last);
  CHECK(last < first - 0.1);
  // Without feedback the mixing weights take no part.
  config.feedback = false;
  auto plain = tb::SpireDraft::init(config, target, 1);
  plain.set_requires_grad(true);
  plain.forward_train(tokens, memory, logits, 4, 0.5, true).loss.backward();
  for (auto& [name, p] : plain.named_parameters())
    if (name == "memory_mix") CHECK((!p.grad().defined() || p.grad().abs().sum().item<double>() == 0.0));
  // ... and are not counted as trainable: one layer's two logits.
  CHECK(plain.num_parameters() == draft.num_parameters() - 2);
}

TEST_CASE("A saved SPIRe draft loads back, and train-spire resumes from its checkpoint", "[torch][spire]") {
  const auto dir = st::fresh_dir("specdec_spire_train");
  auto o = tb::SpireTrainOptions{};
  {
    const auto h = st::tiny_head_train_options(dir);  // target/, train and held-out streams
    o.train_tokens = h.train_tokens;
    o.heldout_tokens = h.heldout_tokens;
    o.target_dir = h.target_dir;
  }
  o.out_dir = dir / "spire";
  o.draft.layers = 1;
  o.draft.window = 6;
  o.steps = 6;
  o.batch_size = 2;
  o.seq_len = 16;
  o.warmup_steps = 2;
  o.eval_windows = 4;
  o.save_dtype = "f32";
  o.max_steps_this_run = 4;
  const auto quiet = [](const std::string&) {};
  const auto stopped = tb::train_spire(o, quiet);
  CHECK_FALSE(stopped.finished);
  CHECK(std::filesystem::exists(o.out_dir / "checkpoint" / "state.json"));
  const auto done = tb::train_spire(o, quiet);
  CHECK(done.finished);
  CHECK(done.resumed_from == 4);
  CHECK(done.steps_run == 2);
  REQUIRE(done.heldout.acceptance.size() == 4);
  CHECK(done.heldout.tau >= 1.0);
  CHECK(done.heldout.tau <= 5.0);

  const auto target = tb::LlamaModel::load(o.target_dir);
  const auto loaded = tb::SpireDraft::load(o.out_dir, target);
  CHECK(loaded.config().first_layer == 1);  // the target's last layer
  CHECK(loaded.num_parameters() == done.num_parameters);
  // The saved f32 weights give the same rollouts as a second load.
  const auto tokens = token_window({10, 11, 12, 13, 14, 15, 16, 10});
  const auto [logits, memory] = loaded.target_inputs(target, tokens);
  const auto again = tb::SpireDraft::load(o.out_dir, target);
  CHECK(at::equal(loaded.forward_train(tokens, memory, logits, 4, 1.0, true).logits,
                  again.forward_train(tokens, memory, logits, 4, 1.0, true).logits));
  CHECK_THROWS_AS(tb::SpireDraft::load(dir / "nowhere", target), sd::ModelLoadError);
}
