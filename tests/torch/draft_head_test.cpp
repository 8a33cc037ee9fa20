// Feature-level draft heads (Lyanna, its ablations, the EAGLE-style head,
// the EAGLE-3 head) on
// tiny random models: the cached inference path computes exactly what the
// unrolled training forward computes, the token-info table is the collapsed
// training bias, and heads save and load.
#include <ATen/ATen.h>

#include <filesystem>
#include <span>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/torch/draft_head.hpp"
#include "specdec/torch/llama_model.hpp"
#include "support/catch.hpp"

namespace sd = specdec;
namespace tb = specdec::torch_backend;

namespace {

sd::io::LlamaConfig tiny_target() {
  sd::io::LlamaConfig c;
  c.vocab_size = 53;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  return c;
}

tb::DraftHeadConfig head_config(tb::HeadKind kind, bool first_token, std::int64_t rank, bool sparse) {
  tb::DraftHeadConfig c;
  c.kind = kind;
  c.first_token = first_token;
  c.token_info_rank = rank;
  if (sparse) c.hot_tokens = {5, 1, 40, 7, 22, 13, 9, 30, 2, 51, 0, 17};
  return c;
}

// Runs the cached inference path for anchor t (1-based) of `tokens` and
// returns the N predicted hidden states [N, d] and their logits with token
// info. `target_hidden` [1, T, feature_width()]: what the verifier hands the
// head (EAGLE-3: its span of layer outputs side by side).
std::pair<at::Tensor, at::Tensor> infer_anchor(tb::DraftHead& head, const at::Tensor& tokens,
                                               const at::Tensor& target_hidden, std::int64_t t, std::int64_t steps) {
  head.reset();
  std::vector<sd::TokenId> context;
  for (std::int64_t i = 1; i <= t; ++i) context.push_back(static_cast<sd::TokenId>(tokens[0][i].item<std::int64_t>()));
  const auto h0 = target_hidden[0].narrow(0, 0, t).contiguous();
  const auto h1 = head.advance(h0.data_ptr<float>(), context, /*first_position=*/1);
  at::Tensor hs;
  if (head.config().kind == tb::HeadKind::kLyanna) {
    hs = head.chain(h1, steps, t);
  } else {
    std::vector<at::Tensor> rows{h1};
    for (std::int64_t s = 2; s <= steps; ++s) {
      const sd::TokenId tok = static_cast<sd::TokenId>(tokens[0][t + s - 1].item<std::int64_t>());
      const std::int64_t pos = t + s - 1;
      rows.push_back(head.extend(rows.back(), std::span(&tok, 1), std::span(&pos, 1), nullptr));
    }
    hs = at::cat(rows, 0);
  }
  auto logits = head.logits(hs).clone();
  for (std::int64_t s = 1; s <= steps; ++s) {
    const auto parent = static_cast<sd::TokenId>(tokens[0][t + s - 1].item<std::int64_t>());
    auto row = logits[s - 1];
    head.token_info().add_to(parent, std::span(row.data_ptr<float>(), static_cast<std::size_t>(row.numel())));
  }
  return {hs, logits};
}

}  // namespace

TEST_CASE("Draft heads: the cached inference path equals the unrolled training forward", "[torch][lyanna]") {
  const auto target = tb::LlamaModel::random(tiny_target(), 3);
  struct Case {
    const char* name;
    tb::DraftHeadConfig config;
  };
  const std::vector<Case> cases = {
      {"lyanna, sparse token info", head_config(tb::HeadKind::kLyanna, true, 4, true)},
      {"lyanna, dense token info", head_config(tb::HeadKind::kLyanna, true, 4, false)},
      {"lyanna without token info", head_config(tb::HeadKind::kLyanna, true, 0, false)},
      {"lyanna without first-token fusion", head_config(tb::HeadKind::kLyanna, false, 4, true)},
      {"eagle", head_config(tb::HeadKind::kEagle, true, 0, false)},
  };
  constexpr std::int64_t kSteps = 3, kAnchors = 9;
  at::manual_seed(5);
  const auto tokens = at::randint(0, 53, {1, kAnchors + kSteps}, at::kLong);
  at::Tensor target_hidden;
  const auto target_logits = target.forward_train(tokens, &target_hidden);
  SECTION("eagle3, layers 0, 2, 3 of a 4-layer target") {
    auto config = tiny_target();
    config.num_hidden_layers = 4;
    const auto deep = tb::LlamaModel::random(config, 3);
    auto head_config3 = head_config(tb::HeadKind::kEagle3, true, 0, false);
    head_config3.feature_layers = {0, 2, 3};  // the span is 0..3: layer 1 must be skipped
    auto head = tb::DraftHead::random(head_config3, deep, 11);
    for (auto& p : head.parameters()) p.add_(at::randn_like(p) * 0.05);
    const auto dir = std::filesystem::temp_directory_path() / "specdec_head_consistency3";
    head.save(dir, sd::DType::kF32);
    head = tb::DraftHead::load(dir, deep);
    CHECK(head.config().feature_layers == std::vector<std::int32_t>{0, 2, 3});
    CHECK(head.feature_layer_first() == 0);
    CHECK(head.feature_layer_count() == 4);
    at::Tensor hidden;
    std::vector<at::Tensor> layers;
    const auto logits = deep.forward_train(tokens, &hidden, at::kFloat, &layers);
    const auto train =
        head.forward_train(tokens, hidden, logits, kSteps, 0.0, 1.0, at::kFloat, head.pick_layers(layers));
    const auto span = at::cat(layers, -1);  // what the verifier hands over: layers 0..3 side by side
    for (std::int64_t t = 1; t <= kAnchors; ++t) {
      const auto [hs, inferred] = infer_anchor(head, tokens, span, t, kSteps);
      for (std::int64_t s = 1; s <= kSteps; ++s) {
        INFO("anchor " << t << ", step " << s);
        CHECK(at::allclose(hs[s - 1], train.hidden[static_cast<std::size_t>(s - 1)][0][t - 1], 1e-4, 1e-4));
        CHECK(at::allclose(inferred[s - 1], train.logits[static_cast<std::size_t>(s - 1)][0][t - 1], 1e-4,
                           1e-4));
      }
    }
    // The fused layers matter: other layer outputs give another first step.
    const auto shuffled = at::cat({layers[1], layers[0], layers[3], layers[2]}, -1);
    const auto [hs_other, unused] = infer_anchor(head, tokens, shuffled, kAnchors, 1);
    CHECK_FALSE(at::allclose(hs_other[0], train.hidden[0][0][kAnchors - 1], 1e-3, 1e-3));
    // Training needs the layers.
    CHECK_THROWS_AS(head.forward_train(tokens, hidden, logits, kSteps, 0.0, 1.0), sd::ShapeError);
  }
  for (const auto& c : cases) {
    SECTION(c.name) {
      auto head = tb::DraftHead::random(c.config, target, 11);
      // Train-mode weights moved off their initial values, so the check is not
      // of an untrained special case (e.g. the token-info gain).
      for (auto& p : head.parameters()) p.add_(at::randn_like(p) * 0.05);
      head = [&] {
        const auto dir = std::filesystem::temp_directory_path() / "specdec_head_consistency";
        head.save(dir, sd::DType::kF32);
        return tb::DraftHead::load(dir, target);  // collapses the moved token-info weights
      }();
      const auto train = head.forward_train(tokens, target_hidden, target_logits, kSteps, 1.0, 1.0);
      REQUIRE(train.hidden.size() == kSteps);
      for (std::int64_t t = 1; t <= kAnchors; ++t) {
        const auto [hs, logits] = infer_anchor(head, tokens, target_hidden, t, kSteps);
        for (std::int64_t s = 1; s <= kSteps; ++s) {
          INFO("anchor " << t << ", step " << s);
          CHECK(at::allclose(hs[s - 1], train.hidden[static_cast<std::size_t>(s - 1)][0][t - 1], 1e-4, 1e-4));
          CHECK(at::allclose(logits[s - 1], train.logits[static_cast<std::size_t>(s - 1)][0][t - 1], 1e-4, 1e-4));
        }
      }
    }
  }
}

TEST_CASE("Draft heads: later steps do depend on earlier draft steps and on the fused token", "[torch][lyanna]") {
  // Guards the consistency test above against a chain that ignores its own
  // staged entries (it would still match a training forward with the same bug
  // only if both were wrong the same way; this pins the dependence itself).
  const auto target = tb::LlamaModel::random(tiny_target(), 4);
  auto head = tb::DraftHead::random(head_config(tb::HeadKind::kLyanna, true, 4, false), target, 2);
  at::manual_seed(1);
  const auto h0 = at::randn({3, 32});
  const std::vector<sd::TokenId> a = {4, 9, 12}, b = {4, 9, 13};
  const auto run = [&](tb::DraftHead& h, const std::vector<sd::TokenId>& tokens) {
    h.reset();
    return h.chain(h.advance(h0.data_ptr<float>(), tokens, 1), 3, 3);
  };
  const auto ha = run(head, a), hb = run(head, b);
  CHECK_FALSE(at::allclose(ha[0], hb[0], 1e-3, 1e-3));  // h_1 sees the bonus token
  CHECK_FALSE(at::allclose(ha[2], hb[2], 1e-3, 1e-3));
  auto no_first = tb::DraftHead::random(head_config(tb::HeadKind::kLyanna, false, 4, false), target, 2);
  const auto na = run(no_first, a), nb = run(no_first, b);
  CHECK(at::allclose(na, nb));  // without first-token fusion the chain never sees a token
}

TEST_CASE("Draft heads: token-info table, save/load and errors", "[torch][lyanna]") {
  const auto target = tb::LlamaModel::random(tiny_target(), 6);
  const auto config = head_config(tb::HeadKind::kLyanna, true, 4, true);
  auto head = tb::DraftHead::random(config, target, 1);
  const auto& table = head.token_info();
  CHECK(table.num_hot() == 12);
  CHECK(table.memory_bytes() == 12 * 12 * 4);
  CHECK(table.dense_memory_bytes() == 53 * 53 * 4);
  CHECK(table.bias(3).empty());        // cold parent: no bias
  CHECK(table.bias(40).size() == 12);  // hot parent: one bias per hot column
  // fc 32x64, the layer (norms 2x32, q 32x32, k/v 16x32, o 32x32, MLP 3x64x32),
  // the output norm 32, token info W_1 32x4, W_2 4x12, gain 12.
  CHECK(head.num_parameters() == 2048 + 64 + 1024 + 2 * 512 + 1024 + 3 * 2048 + 32 + 128 + 48 + 12);
  const auto dir = std::filesystem::temp_directory_path() / "specdec_head_roundtrip";
  head.save(dir, sd::DType::kF32);
  auto loaded = tb::DraftHead::load(dir, target);
  CHECK(loaded.config().hot_tokens == config.hot_tokens);
  CHECK(loaded.num_parameters() == head.num_parameters());
  for (std::size_t i = 0; i < head.parameters().size(); ++i)
    CHECK(at::equal(head.parameters()[i], loaded.parameters()[i]));

  auto other = tiny_target();
  other.vocab_size = 60;
  const auto wrong_target = tb::LlamaModel::random(other, 1);
  CHECK_THROWS_AS(tb::DraftHead::load(dir, wrong_target), sd::ShapeError);
  std::filesystem::remove(dir / "head.safetensors");
  CHECK_THROWS_AS(tb::DraftHead::load(dir, target), sd::Error);

  auto bad = config;
  bad.hot_tokens = {1, 2, 1};
  CHECK_THROWS_AS(tb::DraftHead::random(bad, target, 1), sd::InvalidArgumentError);
  bad.hot_tokens = {1, 99};
  CHECK_THROWS_AS(tb::DraftHead::random(bad, target, 1), sd::InvalidArgumentError);
  const std::vector<sd::TokenId> out_of_vocab = {70};
  const auto h0 = at::zeros({1, 32});
  CHECK_THROWS_AS(head.advance(h0.data_ptr<float>(), out_of_vocab, 1), sd::ShapeError);
  CHECK_THROWS_AS(head.extend(h0, out_of_vocab, std::vector<std::int64_t>{1}, nullptr), sd::UnsupportedError);

  // EAGLE-3 feature layers: increasing, inside the target, on EAGLE-3 heads only.
  auto eagle3 = head_config(tb::HeadKind::kEagle3, true, 0, false);
  eagle3.feature_layers = {0, 2};  // tiny_target() has 2 layers
  CHECK_THROWS_AS(tb::DraftHead::random(eagle3, target, 1), sd::InvalidArgumentError);
  eagle3.feature_layers = {1, 0};
  CHECK_THROWS_AS(tb::DraftHead::random(eagle3, target, 1), sd::InvalidArgumentError);
  eagle3.feature_layers = {};
  CHECK_THROWS_AS(tb::DraftHead::random(eagle3, target, 1), sd::InvalidArgumentError);
  auto eagle = head_config(tb::HeadKind::kEagle, true, 0, false);
  eagle.feature_layers = {0};
  CHECK_THROWS_AS(tb::DraftHead::random(eagle, target, 1), sd::InvalidArgumentError);
  eagle.feature_layers = {};
  eagle3.feature_layers = {0, 1};
  auto two = tb::DraftHead::random(eagle3, target, 1);
  CHECK(two.feature_width() == 2 * 32);
  // fc 32x64 + W_g 32x64 and the layer: the EAGLE head's parameters plus W_g.
  CHECK(two.num_parameters() ==
        tb::DraftHead::random(eagle, tb::LlamaModel::random(tiny_target(), 6), 1).num_parameters() + 32 * 64);
  const std::vector<float> one_layer(32);
  const std::vector<sd::TokenId> token{3};
  std::vector<float> out(32);
  CHECK_THROWS_AS(two.advance(std::span<const float>(one_layer), token, 1, std::span<float>(out)),
                  sd::ShapeError);  // one layer's floats, two needed
  CHECK(tb::DraftHeadConfig::default_feature_layers(6) == std::vector<std::int32_t>{1, 3, 5});
  CHECK_THROWS_AS(tb::DraftHeadConfig::default_feature_layers(2), sd::InvalidArgumentError);
}
