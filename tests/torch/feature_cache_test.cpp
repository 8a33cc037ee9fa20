// `specdec cache-features` and training from it: the cached windows hold the
// target's own tokens and hidden states (to f16), an interrupted build
// resumes to the same bytes, a cache of other settings or another target is
// refused, the epoch sampler visits each window once per epoch, and a head
// trained from the cache (bf16 matmuls included) learns and resumes exactly.
#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "specdec/core/error.hpp"
#include "specdec/io/file_io.hpp"
#include "specdec/torch/draft_head_trainer.hpp"
#include "specdec/torch/feature_cache.hpp"
#include "specdec/torch/packed_linear.hpp"
#include "support/catch.hpp"
#include "support/llama_fixtures.hpp"

namespace sd = specdec;
namespace tb = specdec::torch_backend;
namespace fs = std::filesystem;
namespace st = specdec::testing;

namespace {

// A cache of 40 windows of 27 tokens over tiny_head_train_options' target
// and training tokens (written into `dir`).
tb::FeatureCacheOptions cache_options(const fs::path& dir) {
  const auto head = st::tiny_head_train_options(dir);
  tb::FeatureCacheOptions o;
  o.tokens = head.train_tokens;
  o.target_dir = head.target_dir;
  o.out_dir = dir / "cache";
  o.windows = 40;
  o.window = 27;
  o.batch = 6;
  o.threads = 1;
  return o;
}

void quiet(const std::string&) {}

}  // namespace

TEST_CASE("A feature cache holds the target's tokens and hidden states of its windows", "[torch][train][features]") {
  const auto dir = st::fresh_dir("specdec_feature_cache");
  const auto o = cache_options(dir);
  const auto report = tb::build_feature_cache(o, quiet);
  CHECK(report.finished);
  CHECK(report.windows_done == 40);
  const auto target = tb::LlamaModel::load(o.target_dir);
  const auto cache = tb::FeatureCache::open(o.out_dir, target);
  REQUIRE(cache.windows() == 40);
  REQUIRE(cache.window() == 27);

  std::ifstream meta_file(o.out_dir / "meta.json");
  const auto starts = nlohmann::json::parse(meta_file).at("starts").get<std::vector<std::int64_t>>();
  REQUIRE(starts.size() == 40);
  std::set<std::int64_t> distinct(starts.begin(), starts.end());
  CHECK(distinct.size() == 40);
  for (std::size_t i = 0; i < starts.size(); ++i) {
    CHECK(starts[i] % 27 == 0);  // non-overlapping windows of the file
    CHECK(starts[i] + 27 <= 5000);
  }
  CHECK(starts.back() > 2500);  // drawn from the whole file, not its start

  const auto bytes = sd::io::read_text_file(o.tokens);
  const auto* all = reinterpret_cast<const std::uint16_t*>(bytes.data());
  const std::vector<std::int64_t> pick{0, 17, 39};
  const auto [tokens, hidden] = cache.read(pick, 25);  // a prefix of each window
  REQUIRE(tokens.sizes() == at::IntArrayRef{3, 25});
  REQUIRE(hidden.sizes() == at::IntArrayRef{3, 25, 16});
  at::Tensor expected;
  target.forward_train(tokens, &expected);
  for (std::size_t r = 0; r < pick.size(); ++r)
    for (std::int64_t j = 0; j < 25; ++j)
      CHECK(tokens[static_cast<std::int64_t>(r)][j].item<std::int64_t>() ==
            all[starts[static_cast<std::size_t>(pick[r])] + j]);
  // f16 storage: within half an f16 ulp of values of this size.
  CHECK(at::allclose(hidden, expected, 1e-3, 2e-3));
  CHECK_FALSE(at::equal(hidden[0], hidden[1]));

  CHECK_THROWS_AS(cache.read({40}, 10), sd::InvalidArgumentError);
  CHECK_THROWS_AS(cache.read({0}, 28), sd::InvalidArgumentError);
  fs::remove_all(dir);
}

TEST_CASE("An interrupted feature cache resumes to the same bytes, and other settings are refused",
          "[torch][train][features]") {
  const auto dir = st::fresh_dir("specdec_feature_cache_resume");
  auto o = cache_options(dir);
  tb::build_feature_cache(o, quiet);
  const auto straight_tokens = sd::io::read_text_file(o.out_dir / "tokens.u16");
  const auto straight_hidden = sd::io::read_text_file(o.out_dir / "hidden.f16");

  auto split = o;
  split.out_dir = dir / "split";
  split.time_budget_seconds = 1e-9;  // stops after its first batch
  const auto first = tb::build_feature_cache(split, quiet);
  CHECK_FALSE(first.finished);
  CHECK(first.windows_done == 6);
  const auto target = tb::LlamaModel::load(o.target_dir);
  CHECK_THROWS_AS(tb::FeatureCache::open(split.out_dir, target), sd::ModelLoadError);  // unfinished
  // A torn write: half a window of hidden states past the last whole batch.
  std::ofstream(split.out_dir / "hidden.f16", std::ios::binary | std::ios::app) << std::string(300, 'x');
  split.time_budget_seconds = 0;
  const auto second = tb::build_feature_cache(split, quiet);
  CHECK(second.finished);
  CHECK(second.resumed_from == 6);
  CHECK(sd::io::read_text_file(split.out_dir / "tokens.u16") == straight_tokens);
  CHECK(sd::io::read_text_file(split.out_dir / "hidden.f16") == straight_hidden);

  auto other = o;
  other.windows = 41;  // another cache in the same directory
  CHECK_THROWS_AS(tb::build_feature_cache(other, quiet), sd::InvalidArgumentError);
  other = o;
  other.windows = 1000;  // more windows than the file holds
  other.out_dir = dir / "too_many";
  CHECK_THROWS_AS(tb::build_feature_cache(other, quiet), sd::InvalidArgumentError);
  // Features of another target (hidden size 24) are refused when read.
  tb::LlamaModel::random(st::tiny_training_config(24), 4).save(dir / "wide", sd::DType::kF32);
  CHECK_THROWS_AS(tb::FeatureCache::open(o.out_dir, tb::LlamaModel::load(dir / "wide")), sd::ModelLoadError);
  CHECK_THROWS_AS(tb::FeatureCache::open(dir / "nowhere", target), sd::ModelLoadError);
  fs::remove_all(dir);
}

TEST_CASE("The epoch sampler visits every window once per epoch, by (seed, step) alone", "[torch][train][features]") {
  tb::EpochSampler walk(5, 30);
  std::vector<std::int64_t> seen;
  for (std::int64_t step = 0; step < 15; ++step)  // 4 per step: two epochs of 30
    for (const auto w : walk.step(step, 4)) seen.push_back(w);
  std::vector<std::int64_t> epoch1(seen.begin(), seen.begin() + 30), epoch2(seen.begin() + 30, seen.end());
  std::sort(epoch1.begin(), epoch1.end());
  std::sort(epoch2.begin(), epoch2.end());
  for (std::int64_t i = 0; i < 30; ++i) {
    CHECK(epoch1[static_cast<std::size_t>(i)] == i);
    CHECK(epoch2[static_cast<std::size_t>(i)] == i);
  }
  CHECK(std::vector<std::int64_t>(seen.begin(), seen.begin() + 30) !=
        std::vector<std::int64_t>(seen.begin() + 30, seen.end()));  // a new order each epoch
  tb::EpochSampler fresh(5, 30);
  CHECK(fresh.step(11, 4) == std::vector<std::int64_t>(seen.begin() + 44, seen.begin() + 48));  // a resumed run
  CHECK(tb::EpochSampler(6, 30).step(0, 4) != std::vector<std::int64_t>(seen.begin(), seen.begin() + 4));
}

TEST_CASE("bf16 training matmuls: close to f32, differentiable, f32 results", "[torch][train]") {
  if (!tb::PackedLinear::native_bf16()) WARN("no native bf16 on this CPU: oneDNN emulates it (slowly)");
  auto model = tb::LlamaModel::random(st::tiny_training_config(32), 9);
  model.set_requires_grad(true);
  const auto tokens = at::randint(0, 50, {2, 12}, at::kLong);
  at::Tensor h32, h16;
  const auto y32 = model.forward_train(tokens, &h32);
  const auto y16 = model.forward_train(tokens, &h16, at::kBFloat16);
  CHECK(y16.scalar_type() == at::kFloat);
  CHECK(h16.scalar_type() == at::kFloat);
  // bf16 operands carry 2^-8 relative error each, through two layers.
  CHECK((y16 - y32).abs().max().item<double>() < 0.05 * y32.abs().max().item<double>());
  CHECK(at::allclose(h16, h32, 0.05, 0.05));
  CHECK_FALSE(at::equal(y16, y32));  // it did round
  y16.pow(2).mean().backward();
  for (const auto& [name, p] : model.named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().scalar_type() == at::kFloat);
    CHECK(p.grad().abs().sum().item<double>() > 0.0);
  }
}

TEST_CASE("A head trained from a feature cache learns and resumes exactly", "[torch][train][features][lyanna]") {
  const auto dir = st::fresh_dir("specdec_feature_cache_train");
  auto c = cache_options(dir);
  c.windows = 120;
  tb::build_feature_cache(c, quiet);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    INFO((dtype == at::kFloat ? "f32" : "bf16"));
    auto o = st::tiny_head_train_options(dir);  // the same target and tokens as the cache's
    o.features_dir = c.out_dir;
    o.matmul_dtype = dtype;
    o.out_dir = dir / "straight";
    o.snapshot_every = 20;
    fs::remove_all(o.out_dir);
    const auto report = tb::train_draft_head(o, quiet);
    REQUIRE(report.finished);
    CHECK(report.anchors == 60 * 4 * 24);
    INFO("step-1 agreement " << report.top1[0]);
    CHECK(report.top1[0] > 0.6);
    // The learning curve: held-out agreement at steps 20, 40, 60, and the heads.
    std::ifstream curve(o.out_dir / "curve.jsonl");
    std::vector<nlohmann::json> points;
    for (std::string line; std::getline(curve, line);) points.push_back(nlohmann::json::parse(line));
    REQUIRE(points.size() == 3);
    CHECK(points[0].at("anchors").get<std::int64_t>() == 20 * 4 * 24);
    CHECK(points[2].at("step").get<std::int64_t>() == 60);
    CHECK(points[2].at("top1")[0].get<double>() == Approx(report.top1[0]).margin(0.02));  // f16 snapshot vs final
    CHECK(points[0].at("top1")[0].get<double>() < points[2].at("top1")[0].get<double>());
    const auto target_model = tb::LlamaModel::load(o.target_dir);
    CHECK(tb::DraftHead::load(o.out_dir / "snapshots" / "step-40", target_model).config().token_info_rank == 4);
    o.snapshot_every = 0;

    auto split = o;
    split.out_dir = dir / "split";
    fs::remove_all(split.out_dir);
    split.checkpoint_every = 7;
    split.max_steps_this_run = 23;
    CHECK_FALSE(tb::train_draft_head(split, quiet).finished);
    split.max_steps_this_run = 0;
    CHECK(tb::train_draft_head(split, quiet).resumed_from == 23);
    const auto target = tb::LlamaModel::load(o.target_dir);
    const auto a = tb::DraftHead::load(o.out_dir, target).named_parameters();
    const auto b = tb::DraftHead::load(split.out_dir, target).named_parameters();
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      INFO(a[i].first);
      CHECK(at::equal(a[i].second, b[i].second));
    }
  }
  auto bad = tb::HeadTrainOptions{};
  bad.train_tokens = c.tokens;
  bad.heldout_tokens = c.tokens;
  bad.target_dir = c.target_dir;
  bad.features_dir = c.out_dir;
  bad.out_dir = dir / "bad";
  bad.seq_len = 26;  // + 3 draft steps > the cached 27 tokens
  CHECK_THROWS_AS(tb::train_draft_head(bad, quiet), sd::InvalidArgumentError);
  fs::remove_all(dir);
}

TEST_CASE("A feature cache with layer outputs trains an EAGLE-3 head", "[torch][train][features][eagle3]") {
  const auto dir = st::fresh_dir("specdec_feature_cache_layers");
  auto c = cache_options(dir);
  c.windows = 120;
  c.layers = {0, 1};
  tb::build_feature_cache(c, quiet);
  const auto target = tb::LlamaModel::load(c.target_dir);
  const auto cache = tb::FeatureCache::open(c.out_dir, target);
  CHECK(cache.layers() == std::vector<std::int32_t>{0, 1});
  const std::vector<std::int64_t> pick{3, 77};
  const auto [tokens, hidden] = cache.read(pick, 20);
  const auto layers = cache.read_layers(pick, 20);
  REQUIRE(layers.sizes() == at::IntArrayRef{2, 20, 2 * 16});
  std::vector<at::Tensor> outputs;
  target.forward_train(tokens, nullptr, at::kFloat, &outputs);
  // Raw layer outputs grow larger than the normed state: f16 relative error.
  CHECK(at::allclose(layers, at::cat(outputs, -1), 2e-3, 2e-3));
  CHECK_THROWS_AS(cache.read_layers({120}, 5), sd::InvalidArgumentError);

  auto other = c;
  other.layers = {1};  // another cache in the same directory
  CHECK_THROWS_AS(tb::build_feature_cache(other, quiet), sd::InvalidArgumentError);
  other.layers = {2};  // the target has layers 0 and 1
  other.out_dir = dir / "no_such_layer";
  CHECK_THROWS_AS(tb::build_feature_cache(other, quiet), sd::InvalidArgumentError);
  auto plain = c;
  plain.layers = {};
  plain.out_dir = dir / "plain";
  tb::build_feature_cache(plain, quiet);
  CHECK_THROWS_AS(tb::FeatureCache::open(plain.out_dir, target).read_layers({0}, 5),
                  sd::InvalidArgumentError);

  auto o = st::tiny_head_train_options(dir);
  o.kind = tb::HeadKind::kEagle3;
  o.token_info_rank = 0;
  o.alpha = 0.0;  // EAGLE-3: no feature loss
  o.feature_layers = {0, 1};
  o.features_dir = c.out_dir;
  o.out_dir = dir / "eagle3";
  const auto report = tb::train_draft_head(o, quiet);
  REQUIRE(report.finished);
  INFO("step-1 agreement " << report.top1[0] << ", step 3 " << report.top1[2]);
  CHECK(report.top1[0] > 0.6);
  CHECK(report.top1[2] > 0.4);  // later steps read the head's own outputs, trained with training-time test
  const auto head = tb::DraftHead::load(o.out_dir, target);
  CHECK(head.config().kind == tb::HeadKind::kEagle3);
  CHECK(head.config().feature_layers == std::vector<std::int32_t>{0, 1});

  auto from_plain = o;  // a cache without the head's layers is refused
  from_plain.features_dir = plain.out_dir;
  from_plain.out_dir = dir / "from_plain";
  CHECK_THROWS_AS(tb::train_draft_head(from_plain, quiet), sd::InvalidArgumentError);
  auto live = o;  // without a cache: the target's layers run live
  live.features_dir.clear();
  live.out_dir = dir / "live";
  live.steps = 4;
  CHECK(tb::train_draft_head(live, quiet).finished);
  auto eagle = o;
  eagle.kind = tb::HeadKind::kEagle;
  eagle.out_dir = dir / "eagle";
  CHECK_THROWS_AS(tb::train_draft_head(eagle, quiet), sd::InvalidArgumentError);  // --layers without eagle3
  fs::remove_all(dir);
}
