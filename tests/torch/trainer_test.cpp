// The trainer learns, resumes exactly where it stopped, distills, and rejects
// bad options and token files.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/torch/llama_model.hpp"
#include "specdec/torch/trainer.hpp"
#include "support/catch.hpp"
#include "support/llama_fixtures.hpp"

namespace sd = specdec;
namespace tb = specdec::torch_backend;
namespace fs = std::filesystem;
namespace st = specdec::testing;

namespace {

tb::TrainOptions options(const fs::path& dir) {
  tb::TrainOptions o;
  o.train_tokens = st::write_period_tokens(dir / "train.u16", 5000, 50);
  o.heldout_tokens = st::write_period_tokens(dir / "heldout.u16", 1000, 50);
  o.model = st::tiny_training_config(16);
  o.steps = 150;
  o.batch_size = 4;
  o.seq_len = 32;
  o.lr = 1e-2;
  o.min_lr = 1e-3;
  o.warmup_steps = 5;
  o.checkpoint_every = 1000;
  o.eval_windows = 8;
  o.save_dtype = "f32";
  o.threads = 1;  // bitwise-reproducible runs
  return o;
}

void quiet(const std::string&) {}

}  // namespace

TEST_CASE("The learning rate warms up linearly and decays by cosine to min_lr", "[torch][train]") {
  tb::TrainOptions o;
  o.steps = 110;
  o.warmup_steps = 10;
  o.lr = 1.0;
  o.min_lr = 0.1;
  CHECK(tb::learning_rate(o, 0) == Approx(0.1));
  CHECK(tb::learning_rate(o, 9) == Approx(1.0));
  CHECK(tb::learning_rate(o, 10) == Approx(1.0));
  CHECK(tb::learning_rate(o, 60) == Approx(0.55));  // half way: (1 + 0.1) / 2
  CHECK(tb::learning_rate(o, 110) == Approx(0.1));
}

TEST_CASE("Training learns a periodic stream and reports held-out perplexity", "[torch][train]") {
  const auto dir = st::fresh_dir("specdec_trainer_learns");
  auto o = options(dir);
  o.out_dir = dir / "model";
  const auto r = tb::train_language_model(o, quiet);
  CHECK(r.finished);
  CHECK(r.steps_run == 150);
  CHECK(r.final_loss < 0.5 * std::log(50.0));  // well below the uniform guess
  CHECK(r.heldout_perplexity < 10.0);
  CHECK(fs::exists(o.out_dir / "model.safetensors"));
  CHECK_FALSE(fs::exists(o.out_dir / "checkpoint"));
  fs::remove_all(dir);
}

TEST_CASE("An interrupted run resumes to exactly the weights of an uninterrupted one", "[torch][train]") {
  const auto dir = st::fresh_dir("specdec_trainer_resume");
  auto straight = options(dir);
  straight.out_dir = dir / "straight";
  tb::train_language_model(straight, quiet);

  auto split = options(dir);
  split.out_dir = dir / "split";
  split.checkpoint_every = 7;
  split.max_steps_this_run = 17;
  const auto first = tb::train_language_model(split, quiet);
  CHECK_FALSE(first.finished);
  CHECK(fs::exists(split.out_dir / "checkpoint" / "state.json"));
  split.max_steps_this_run = 0;
  const auto second = tb::train_language_model(split, quiet);
  CHECK(second.finished);
  CHECK(second.resumed_from == 17);
  CHECK(second.steps_run == 133);

  const auto a = tb::LlamaModel::load(straight.out_dir).named_parameters();
  const auto b = tb::LlamaModel::load(split.out_dir).named_parameters();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    CHECK(at::equal(a[i].second, b[i].second));
  }
  fs::remove_all(dir);
}

TEST_CASE("A run killed inside its checkpoint's swap resumes from the checkpoint it left", "[torch][train]") {
  const auto dir = st::fresh_dir("specdec_trainer_killed");
  auto o = options(dir);
  o.out_dir = dir / "run";
  o.max_steps_this_run = 10;
  tb::train_language_model(o, quiet);
  // A kill -9 between the swap's two renames: the new checkpoint is still
  // under its temporary name, and none under its own.
  fs::rename(o.out_dir / "checkpoint", o.out_dir / "checkpoint.tmp");
  o.max_steps_this_run = 3;
  const auto second = tb::train_language_model(o, quiet);
  CHECK(second.resumed_from == 10);
  CHECK(fs::exists(o.out_dir / "checkpoint" / "state.json"));
  CHECK_FALSE(fs::exists(o.out_dir / "checkpoint.tmp"));
  // A kill -9 while the next one was being written: an incomplete temporary
  // (no state.json yet) beside the complete checkpoint, which wins.
  fs::create_directories(o.out_dir / "checkpoint.tmp");
  std::ofstream(o.out_dir / "checkpoint.tmp" / "optimizer.pt") << "half";
  const auto third = tb::train_language_model(o, quiet);
  CHECK(third.resumed_from == 13);
  // A state.json that is not one: a typed error naming it.
  std::ofstream(o.out_dir / "checkpoint" / "state.json") << "{\"seed\": 1, \"st";
  CHECK_THROWS_AS(tb::train_language_model(o, quiet), sd::ModelLoadError);
  fs::remove_all(dir);
}

TEST_CASE("A warm start continues from saved weights at the given step", "[torch][train]") {
  const auto dir = st::fresh_dir("specdec_trainer_warm");
  auto first = options(dir);
  first.out_dir = dir / "first";
  first.steps = 20;
  const auto a = tb::train_language_model(first, quiet);
  auto warm = options(dir);
  warm.out_dir = dir / "warm";
  warm.init_from = first.out_dir;
  warm.start_step = 140;
  const auto b = tb::train_language_model(warm, quiet);
  CHECK(b.steps_run == 10);
  CHECK(b.final_loss < a.final_loss);  // it starts from trained weights, not from scratch
  warm.start_step = 150;
  REQUIRE_THROWS_AS(tb::train_language_model(warm, quiet), sd::InvalidArgumentError);
  fs::remove_all(dir);
}

TEST_CASE("Distillation pulls the student toward the teacher's distribution", "[torch][train]") {
  const auto dir = st::fresh_dir("specdec_trainer_distill");
  auto teach = options(dir);
  teach.out_dir = dir / "teacher";
  teach.model = st::tiny_training_config(32);
  tb::train_language_model(teach, quiet);

  auto student = options(dir);
  student.out_dir = dir / "student";
  student.teacher_dir = teach.out_dir;
  student.steps = 150;
  const auto r = tb::train_language_model(student, quiet);
  CHECK(r.finished);
  // The soft loss is the teacher's entropy plus KL: it must end far below the
  // uniform guess, and the student must agree with the teacher's argmax.
  CHECK(r.final_loss < 0.5 * std::log(50.0));
  const auto t = tb::LlamaModel::load(teach.out_dir), s = tb::LlamaModel::load(student.out_dir);
  std::vector<std::int64_t> text;
  for (int i = 0; i < 30; ++i) text.push_back(10 + i % 7);
  const auto input = at::tensor(text, at::kLong).unsqueeze(0);
  const auto agree = (t.forward_train(input).argmax(-1) == s.forward_train(input).argmax(-1)).to(at::kFloat).mean();
  CHECK(agree.item<double>() > 0.9);

  auto bad = options(dir);
  bad.out_dir = dir / "bad";
  bad.teacher_dir = teach.out_dir;
  bad.model.vocab_size = 60;
  REQUIRE_THROWS_WITH(tb::train_language_model(bad, quiet), Catch::Contains("teacher vocabulary 50"));
  fs::remove_all(dir);
}

TEST_CASE("The trainer rejects bad options and token files", "[torch][train]") {
  const auto dir = st::fresh_dir("specdec_trainer_bad");
  auto o = options(dir);
  o.out_dir = dir / "m";
  auto bad = o;
  bad.steps = 0;
  REQUIRE_THROWS_AS(tb::train_language_model(bad, quiet), sd::InvalidArgumentError);
  bad = o;
  bad.min_lr = 1.0;
  REQUIRE_THROWS_AS(tb::train_language_model(bad, quiet), sd::InvalidArgumentError);
  bad = o;
  bad.seq_len = 100;  // beyond max_position_embeddings 64
  REQUIRE_THROWS_WITH(tb::train_language_model(bad, quiet), Catch::Contains("max_position_embeddings"));
  bad = o;
  bad.save_dtype = "int8";
  REQUIRE_THROWS_AS(tb::train_language_model(bad, quiet), sd::InvalidArgumentError);
  bad = o;
  bad.model.vocab_size = 12;  // the stream holds ids up to 49
  REQUIRE_THROWS_WITH(tb::train_language_model(bad, quiet), Catch::Contains("outside the model vocabulary"));
  bad = o;
  std::ofstream(dir / "odd.u16", std::ios::binary) << "abc";
  bad.train_tokens = dir / "odd.u16";
  REQUIRE_THROWS_WITH(tb::train_language_model(bad, quiet), Catch::Contains("whole number"));
  fs::remove_all(dir);
}
