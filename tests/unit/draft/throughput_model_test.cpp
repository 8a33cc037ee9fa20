// SPIRe's performance model (policy/throughput_model.hpp), against figures
// worked out by hand: a Llama's cost terms, memory- and compute-bound
// forwards, the multiplier, and the choice of k.
#include <cmath>

#include "specdec/core/error.hpp"
#include "specdec/policy/throughput_model.hpp"
#include "support/catch.hpp"

namespace sd = specdec;

namespace {

// The default target's shape (models/target/config.json).
sd::io::LlamaConfig target_config() { return sd::io::default_model_config("target", 8000); }

}  // namespace

TEST_CASE("A Llama's forward cost terms follow from its config", "[unit][policy]") {
  const auto f = sd::ForwardCost::of_llama(target_config(), 2.0, 4.0);
  // Per layer: q|k|v 512 x (512 + 2 x 256), o 512 x 512, gate|up|down 3 x 512 x 1408.
  const double per_layer = 512.0 * 1024 + 512.0 * 512 + 3.0 * 512 * 1408;
  const double params = 6 * per_layer + 8000.0 * 512;  // + the tied head, read once
  CHECK(f.weight_bytes == 2.0 * params);
  CHECK(params == 21797376.0 - 6 * 2 * 512 - 512);  // the model's parameters but its norms
  CHECK(f.matmul_flops_per_token == 2.0 * params);
  CHECK(f.kv_bytes_per_token == 6 * 2 * 256 * 4.0);  // 12 KiB of f32 keys and values per token
  CHECK(f.attention_flops_per_key == 6 * 4 * 512.0);
}

TEST_CASE("A forward costs the larger of its compute and its memory traffic", "[unit][policy]") {
  sd::ForwardCost f;
  f.weight_bytes = 1e6;
  f.matmul_flops_per_token = 1e6;
  f.kv_bytes_per_token = 100.0;
  f.attention_flops_per_key = 10.0;
  const sd::HardwareRates hw{1e9, 1e10};
  // One token, 10 keys: memory (1e6 + 1000 bytes) dominates its compute (1.0001e6 FLOPs).
  CHECK(f.seconds(hw, 1, 1, 10) == Approx((1e6 + 1e3) / 1e9));
  // 64 sequences x 5 tokens: compute 320 x (1e6 + 1e4) FLOPs = 32.3 ms > memory 1.064 ms.
  CHECK(f.seconds(hw, 64, 5, 1000) == Approx(320 * (1e6 + 1e4) / 1e10));
  CHECK(f.seconds(hw, 64, 5, 1000, sd::CostOverlap::kSum) ==
        Approx(320 * (1e6 + 1e4) / 1e10 + (1e6 + 64e5) / 1e9));
}

TEST_CASE("The multiplier is tau over the round's cost in target steps", "[unit][policy]") {
  const auto target = sd::ForwardCost::of_llama(target_config(), 2.0, 4.0);
  auto small = target_config();
  small.num_hidden_layers = 1;
  const sd::DraftCost vanilla{sd::ForwardCost::of_llama(small, 2.0, 4.0), 0};
  const sd::DraftCost magicdec{target, 65};
  const sd::HardwareRates hw{40e9, 4e11};
  // Memory-bound (batch 1, short context): HOI cancels, Delta t is a ratio of bytes.
  const auto p = sd::predict_throughput(target, vanilla, hw, 1, 16, 4, 3.5);
  const double n_t = target.weight_bytes + 16 * target.kv_bytes_per_token,
               n_d = vanilla.forward.weight_bytes + 16 * vanilla.forward.kv_bytes_per_token;
  CHECK(p.delta_t == Approx((4 * n_d + n_t) / n_t));
  CHECK(p.multiplier == Approx(3.5 / p.delta_t));
  // MagicDec drafts with the target's weights: at batch 1 a draft step costs a
  // target step, so it loses; at batch 64 and context 1024 the KV cache
  // dominates and its 65-key draft steps are cheap.
  CHECK(sd::predict_throughput(target, magicdec, hw, 1, 1024, 4, 4.0).multiplier < 1.0);
  const auto wide = sd::predict_throughput(target, magicdec, hw, 64, 1024, 4, 4.0);
  CHECK(wide.t_draft < 0.5 * wide.t_target);
  CHECK_THROWS_AS(sd::predict_throughput(target, magicdec, hw, 1, 16, 4, 5.5), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::predict_throughput(target, magicdec, sd::HardwareRates{}, 1, 16, 4, 2.0),
                  sd::InvalidArgumentError);
}

TEST_CASE("The draft length that pays most grows with acceptance, and none pays when drafts cost too much",
          "[unit][policy]") {
  CHECK(sd::expected_tokens(0.0, 4) == 1.0);
  CHECK(sd::expected_tokens(1.0, 4) == 5.0);
  CHECK(sd::expected_tokens(0.5, 2) == Approx(1.75));
  sd::ForwardCost target;
  target.weight_bytes = 1e8;
  target.matmul_flops_per_token = 1e8;
  sd::DraftCost draft{target, 0};
  draft.forward.weight_bytes = 1e7;  // a tenth of the target's bytes
  const sd::HardwareRates hw{1e10, 1e13};
  const auto low = sd::best_draft_length(target, draft, hw, 1, 0, 0.5, 16);
  const auto high = sd::best_draft_length(target, draft, hw, 1, 0, 0.9, 16);
  CHECK(low >= 1);
  CHECK(high > low);
  draft.forward.weight_bytes = 1e8;  // as costly as the target: no k pays at batch 1
  CHECK(sd::best_draft_length(target, draft, hw, 1, 0, 0.5, 16) == 0);
}

TEST_CASE("Measured forward costs interpolate by rows and add attention per key", "[unit][policy]") {
  const sd::MeasuredForwardCost f({1, 4, 16}, {1.0, 2.0, 2.5}, 0.01);
  CHECK(f.weights_seconds(1) == Approx(1.0));
  CHECK(f.weights_seconds(2) == Approx(1.0 + 1.0 / 3.0));
  CHECK(f.weights_seconds(10) == Approx(2.25));
  CHECK(f.weights_seconds(32) == Approx(2.0 + 0.5 * 28.0 / 12.0));  // extrapolated from the last two
  // 2 sequences x 3 tokens, each seeing 10 keys: weights(6) + 60 key reads.
  CHECK(f.seconds(2, 3, 10) == Approx(f.weights_seconds(6) + 60 * 0.01));
  // Two query heads per kv head, four queries per read of its keys: one
  // token reads them once, five tokens (10 queries) three times.
  const sd::MeasuredForwardCost grouped({1, 4, 16}, {1.0, 2.0, 2.5}, 0.01, 2, 4);
  CHECK(grouped.seconds(2, 1, 10) == Approx(grouped.weights_seconds(2) + 2 * 10 * 0.01));
  CHECK(grouped.seconds(2, 5, 10) == Approx(grouped.weights_seconds(10) + 3 * 2 * 10 * 0.01));
  // When a later read costs 0.4 of the first (the keys still cached), five
  // tokens' three reads cost 1 + 2 x 0.4 of one; one token's is unchanged.
  const sd::MeasuredForwardCost cached({1, 4, 16}, {1.0, 2.0, 2.5}, 0.01, 2, 4, 0.4);
  CHECK(cached.read_cost(1) == Approx(1.0));
  CHECK(cached.read_cost(5) == Approx(1.8));
  CHECK(cached.seconds(2, 1, 10) == Approx(grouped.seconds(2, 1, 10)));
  CHECK(cached.seconds(2, 5, 10) == Approx(cached.weights_seconds(10) + 1.8 * 2 * 10 * 0.01));
  CHECK(cached.with_later_read(1.0).seconds(2, 5, 10) == Approx(grouped.seconds(2, 5, 10)));
  CHECK_THROWS_AS(sd::MeasuredForwardCost({1, 4}, {1.0, 2.0}, 0.01, 2, 4, -0.1), sd::InvalidArgumentError);
  // The round from measured costs: a draft of a tenth of a step, verification at 1.5 steps.
  const sd::MeasuredForwardCost draft({1, 2}, {0.1, 0.15}, 0.0);
  const auto p = sd::predict_throughput(f, draft, 0, 1, 0, 4, 3.0);
  CHECK(p.t_target == Approx(1.0));
  CHECK(p.t_draft == Approx(0.1));
  CHECK(p.t_verify == Approx(f.weights_seconds(5)));
  CHECK(p.multiplier == Approx(3.0 / ((4 * 0.1 + f.weights_seconds(5)) / 1.0)));
  CHECK_THROWS_AS(sd::MeasuredForwardCost({4, 1}, {1.0, 2.0}, 0.0), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::MeasuredForwardCost({1}, {1.0}, 0.0), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::throughput_from_seconds(1.0, 0.1, 1.0, 2, 3.5), sd::InvalidArgumentError);
}
