// `specdec train-lyanna`'s trainer: the head learns to agree with its target,
// an interrupted run resumes to exactly the weights of an uninterrupted one,
// hot tokens come from the training corpus, and bad options are typed errors.
#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/torch/draft_head_trainer.hpp"
#include "support/catch.hpp"
#include "support/llama_fixtures.hpp"

namespace sd = specdec;
namespace tb = specdec::torch_backend;
namespace fs = std::filesystem;
namespace st = specdec::testing;

namespace {

tb::HeadTrainOptions options(const fs::path& dir) { return st::tiny_head_train_options(dir); }

void quiet(const std::string&) {}

}  // namespace

TEST_CASE("The head trainer learns to agree with the target", "[torch][train][lyanna]") {
  const auto dir = st::fresh_dir("specdec_head_trainer_learns");
  auto o = options(dir);
  o.out_dir = dir / "head";
  const auto target = tb::LlamaModel::load(o.target_dir);
  tb::DraftHeadConfig config;
  config.token_info_rank = 4;
  std::vector<double> before, chain_before;
  tb::evaluate_draft_head(tb::DraftHead::random(config, target, o.seed), target, o.heldout_tokens, 8, o.seq_len, 3,
                          before, chain_before);
  const auto report = tb::train_draft_head(o, quiet);
  REQUIRE(report.finished);
  REQUIRE(report.top1.size() == 3);
  INFO("step-1 agreement " << before[0] << " -> " << report.top1[0]);
  CHECK(report.top1[0] > before[0] + 0.2);
  CHECK(report.top1[0] > 0.6);
  CHECK(report.chain_top1[2] <= report.chain_top1[0]);
  // The hot set: the 12 most frequent training tokens, 10..16 first (the period).
  const auto head = tb::DraftHead::load(o.out_dir, target);
  REQUIRE(head.config().hot_tokens.size() == 12);
  std::vector<sd::TokenId> first(head.config().hot_tokens.begin(), head.config().hot_tokens.begin() + 7);
  std::sort(first.begin(), first.end());
  CHECK(first == std::vector<sd::TokenId>{10, 11, 12, 13, 14, 15, 16});
  CHECK(report.hot_coverage > 0.98);
  CHECK(fs::exists(o.out_dir / "train_report.json"));
  fs::remove_all(dir);
}

TEST_CASE("An interrupted head run resumes to exactly the weights of an uninterrupted one", "[torch][train][lyanna]") {
  const auto dir = st::fresh_dir("specdec_head_trainer_resume");
  for (const auto variant : {tb::HeadKind::kLyanna, tb::HeadKind::kEagle}) {
    auto straight = options(dir);
    straight.kind = variant;
    if (variant == tb::HeadKind::kEagle) straight.token_info_rank = 0;
    straight.steps = 20;
    straight.out_dir = dir / "straight";
    fs::remove_all(straight.out_dir);
    tb::train_draft_head(straight, quiet);

    auto split = straight;
    split.out_dir = dir / "split";
    fs::remove_all(split.out_dir);
    split.checkpoint_every = 4;
    split.max_steps_this_run = 9;
    CHECK_FALSE(tb::train_draft_head(split, quiet).finished);
    split.max_steps_this_run = 0;
    const auto second = tb::train_draft_head(split, quiet);
    CHECK(second.finished);
    CHECK(second.resumed_from == 9);

    const auto target = tb::LlamaModel::load(straight.target_dir);
    const auto a = tb::DraftHead::load(straight.out_dir, target).named_parameters();
    const auto b = tb::DraftHead::load(split.out_dir, target).named_parameters();
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      INFO(a[i].first);
      CHECK(at::equal(a[i].second, b[i].second));
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("The head trainer rejects bad options", "[torch][train][lyanna]") {
  const auto dir = st::fresh_dir("specdec_head_trainer_bad");
  auto o = options(dir);
  o.out_dir = dir / "head";
  auto bad = o;
  bad.steps = 0;
  CHECK_THROWS_AS(tb::train_draft_head(bad, quiet), sd::InvalidArgumentError);
  bad = o;
  bad.alpha = 0;
  bad.beta = 0;
  CHECK_THROWS_AS(tb::train_draft_head(bad, quiet), sd::InvalidArgumentError);
  bad = o;
  bad.kind = tb::HeadKind::kEagle;  // with token info: not an EAGLE head
  CHECK_THROWS_AS(tb::train_draft_head(bad, quiet), sd::InvalidArgumentError);
  bad = o;
  bad.save_dtype = "f8";
  CHECK_THROWS_AS(tb::train_draft_head(bad, quiet), sd::InvalidArgumentError);
  bad = o;
  bad.train_tokens = st::write_period_tokens(dir / "short.u16", 10);
  CHECK_THROWS_AS(tb::train_draft_head(bad, quiet), sd::ModelLoadError);
  fs::remove_all(dir);
}
