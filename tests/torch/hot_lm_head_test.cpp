// The hot-vocabulary LM head (FR-Spec): exactly the full head's logits on the
// hot tokens and -inf elsewhere, in a draft model and in the draft heads, the
// hot set read from a token-frequency file, typed errors, and methods with
// hot=H still decode greedily exactly like autoregressive decoding.
#include "specdec/torch/hot_lm_head.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "specdec/core/error.hpp"
#include "specdec/engine/autoregressive_decoder.hpp"
#include "specdec/torch/draft_head.hpp"
#include "specdec/torch/llama_model.hpp"
#include "specdec/torch/methods.hpp"
#include "support/catch.hpp"
#include "support/llama_fixtures.hpp"

namespace sd = specdec;
namespace tb = specdec::torch_backend;
namespace st = specdec::testing;
namespace fs = std::filesystem;

namespace {

const std::vector<sd::TokenId> kHot = {3, 7, 9, 0, 12, 41, 60, 25, 33, 1, 2, 4, 5, 6};

std::vector<sd::DType> dtypes() {
  if (tb::PackedLinear::native_bf16()) return {sd::DType::kF32, sd::DType::kBF16};
  return {sd::DType::kF32};
}

// Rows of `logits` [rows, vocab]: the hot columns close to `full`'s, the rest -inf.
void check_hot_rows(const std::vector<float>& logits, const std::vector<float>& full, std::int64_t vocab,
                    double tolerance) {
  const auto rows = static_cast<std::int64_t>(full.size()) / vocab;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t v = 0; v < vocab; ++v) {
      const auto i = static_cast<std::size_t>(r * vocab + v);
      INFO("row " << r << ", token " << v);
      if (std::find(kHot.begin(), kHot.end(), static_cast<sd::TokenId>(v)) == kHot.end())
        CHECK(logits[i] == -std::numeric_limits<float>::infinity());
      else
        CHECK(std::abs(logits[i] - full[i]) <= tolerance * (1.0 + std::abs(full[i])));
    }
}

fs::path write_frequencies(const fs::path& dir, std::int64_t vocab) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(vocab), 0);
  for (std::int64_t v = 0; v < vocab; ++v) counts[static_cast<std::size_t>(v)] = (v * 37) % 11;  // ties
  fs::create_directories(dir);
  std::ofstream(dir / "token_frequencies.json") << nlohmann::json{{"counts", counts}}.dump();
  return dir / "token_frequencies.json";
}

}  // namespace

TEST_CASE("A hot LM head computes the hot tokens' logits and -inf elsewhere", "[torch][hot]") {
  const auto lm_head = at::randn({61, 24});
  const auto h = at::randn({5, 24});
  for (const auto dtype : dtypes()) {
    INFO(sd::dtype_name(dtype));
    const tb::PackedLinear full(lm_head, dtype);
    const tb::HotLmHead hot(lm_head, kHot, dtype);
    CHECK(hot.vocab_size() == 61);
    CHECK(std::vector<sd::TokenId>(hot.tokens().begin(), hot.tokens().end()) == kHot);
    std::vector<float> want(5 * 61), got(5 * 61, 123.0f);
    full.forward(h.data_ptr<float>(), 5, want.data());
    hot.forward(h.data_ptr<float>(), 5, got.data());
    check_hot_rows(got, want, 61, 1e-5);  // the same rows, the same sums
  }
  CHECK_THROWS_AS(tb::HotLmHead(lm_head, {}, sd::DType::kF32), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::HotLmHead(lm_head, {3, 61}, sd::DType::kF32), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::HotLmHead(lm_head, {3, -1}, sd::DType::kF32), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::HotLmHead(lm_head, {3, 7, 3}, sd::DType::kF32), sd::InvalidArgumentError);
}

TEST_CASE("The hot vocabulary is the most frequent tokens of a frequency file", "[torch][hot]") {
  const auto dir = fs::temp_directory_path() / "specdec_hot_vocabulary";
  fs::remove_all(dir);
  const auto file = write_frequencies(dir, 61);
  // counts (v * 37) % 11: 10 for v = 8, 19, 30, 41, 52, then 9 for 5, 16, 27, ...; ties go to the lower id.
  const auto top = tb::hot_vocabulary(file, 8, 61);
  CHECK(top == std::vector<sd::TokenId>{8, 19, 30, 41, 52, 5, 16, 27});
  CHECK(tb::hot_vocabulary(file, 61, 61).size() == 61);
  CHECK_THROWS_AS(tb::hot_vocabulary(file, 0, 61), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::hot_vocabulary(file, 62, 61), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::hot_vocabulary(file, 8, 60), sd::ModelLoadError);  // counts of another vocabulary
  CHECK_THROWS_AS(tb::hot_vocabulary(dir / "missing.json", 8, 61), sd::ModelLoadError);
  std::ofstream(dir / "bad.json") << R"({"hot": [1, 2]})";
  CHECK_THROWS_AS(tb::hot_vocabulary(dir / "bad.json", 2, 61), sd::ModelLoadError);
  fs::remove_all(dir);
}

TEST_CASE("A draft model and the draft heads with a hot LM head", "[torch][hot]") {
  auto model = tb::LlamaModel::random(st::tiny_decoding_config(1, 16), 4);
  for (const auto dtype : dtypes()) {
    INFO(sd::dtype_name(dtype));
    model.set_inference_dtype(dtype);
    const std::vector<sd::TokenId> tokens{7, 3, 9, 3, 7};
    const std::vector<std::int64_t> positions{0, 1, 2, 3, 4};
    const auto run = [&](std::int32_t seq) {
      std::vector<float> logits(tokens.size() * 61);
      model.open(seq);
      const sd::SequenceInput in{seq, tokens, positions};
      sd::ForwardRequest request{std::span(&in, 1)};
      request.logits = sd::TensorView(logits.data(), sd::DType::kF32, {5, 61});
      model.forward(request);
      model.close(seq);
      return logits;
    };
    model.set_hot_lm_head(nullptr);
    const auto full = run(0);
    model.set_hot_lm_head(std::make_shared<const tb::HotLmHead>(model.lm_head(), kHot, dtype));
    check_hot_rows(run(1), full, 61, 1e-5);
    model.set_hot_lm_head(nullptr);
  }
  model.set_inference_dtype(sd::DType::kF32);
  model.set_hot_lm_head(std::make_shared<const tb::HotLmHead>(model.lm_head(), kHot, sd::DType::kF32));
  if (tb::PackedLinear::native_bf16()) {
    model.set_inference_dtype(sd::DType::kBF16);  // rebuilt in the new precision, same tokens
    REQUIRE(model.hot_lm_head() != nullptr);
    CHECK(std::vector<sd::TokenId>(model.hot_lm_head()->tokens().begin(), model.hot_lm_head()->tokens().end()) == kHot);
  }
  CHECK_THROWS_AS(model.set_hot_lm_head(std::make_shared<const tb::HotLmHead>(at::randn({40, 16}), kHot,
                                                                              sd::DType::kF32)),
                  sd::InvalidArgumentError);

  const auto target = tb::LlamaModel::random(st::tiny_decoding_config(2, 32), 5);
  for (const auto kind : {tb::HeadKind::kLyanna, tb::HeadKind::kEagle}) {
    tb::DraftHeadConfig config;
    config.kind = kind;
    config.token_info_rank = kind == tb::HeadKind::kLyanna ? 4 : 0;
    auto head = tb::DraftHead::random(config, target, 1);
    const auto h = at::randn({3, 32});
    std::vector<float> full(3 * 61), hot(3 * 61);
    head.logits(std::span<const float>(h.data_ptr<float>(), 96), full);
    head.set_hot_lm_head(std::make_shared<const tb::HotLmHead>(head.lm_head(), kHot, head.inference_dtype()));
    head.logits(std::span<const float>(h.data_ptr<float>(), 96), hot);
    check_hot_rows(hot, full, 61, 1e-5);
    const auto fork = head.fork();  // forks share it
    CHECK(fork.hot_lm_head() == head.hot_lm_head());
    const auto t = head.logits(h);
    check_hot_rows(std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + 3 * 61), full, 61, 1e-5);
  }
}

TEST_CASE("Methods with hot=H decode greedily exactly like autoregressive decoding", "[torch][hot][engine]") {
  auto target = tb::LlamaModel::random(st::tiny_decoding_config(2, 32), 3);
  auto draft = tb::LlamaModel::random(st::tiny_decoding_config(1, 16), 4);
  const auto heads = fs::temp_directory_path() / "specdec_hot_methods";
  fs::remove_all(heads);
  write_frequencies(heads, 61);
  tb::DraftHeadConfig lyanna;
  lyanna.token_info_rank = 4;
  lyanna.hot_tokens = {1, 2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31};
  tb::DraftHead::random(lyanna, target, 1).save(heads / "lyanna", sd::DType::kF32);
  tb::DraftHeadConfig eagle;
  eagle.kind = tb::HeadKind::kEagle;
  eagle.token_info_rank = 0;
  tb::DraftHead::random(eagle, target, 2).save(heads / "eagle", sd::DType::kF32);
  const std::vector<sd::TokenId> prompt{7, 3, 9, 3, 7, 3, 9};
  for (const auto dtype : dtypes()) {
    INFO(sd::dtype_name(dtype));
    target.set_inference_dtype(dtype);
    draft.set_inference_dtype(dtype);
    sd::AutoregressiveDecoder ar(target, 9);
    sd::GenerationOptions o;
    o.max_new_tokens = 32;
    const auto reference = ar.generate(prompt, o).tokens;
    for (const char* spec : {"chain:k=3:hot=12", "chain:k=3:hot=61", "dynamic:top_k=3:depth=3:total=8:hot=20",
                             "tree:hot=8", "lyanna:hot=12", "lyanna:k=2:depth=3:budget=4:hot=30", "eagle:hot=12"}) {
      INFO(spec);
      auto method = tb::make_method(tb::parse_method(spec), target, &draft, sd::SamplingParams{0.0f}, heads);
      CHECK(method.generate(prompt, o).tokens == reference);
      CHECK(method.name() == tb::parse_method(method.name()).spec());
    }
    // The draft model is shared: a hot method leaves it as it found it.
    CHECK(draft.hot_lm_head() == nullptr);
    // A restricted draft proposes only hot tokens: here the two most frequent, 8 and 19.
    auto narrow = tb::make_method(tb::parse_method("chain:k=3:hot=2"), target, &draft, sd::SamplingParams{0.0f}, heads);
    std::int64_t drafted = 0, outside = 0;
    narrow.set_round_view_observer([&](const sd::RoundView& v) {
      for (std::int32_t i = 0; i < v.tree->size(); ++i) {
        ++drafted;
        outside += v.tree->token(i) != 8 && v.tree->token(i) != 19;
      }
    });
    CHECK(narrow.generate(prompt, o).tokens == reference);
    CHECK(drafted > 10);
    CHECK(outside == 0);
  }
  CHECK_THROWS_AS(tb::make_method(tb::parse_method("chain:hot=-1"), target, &draft, {}, heads), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::make_method(tb::parse_method("chain:hot=62"), target, &draft, {}, heads), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::make_method(tb::parse_method("chain:hot=8"), target, &draft, {}, heads / "nowhere"),
                  sd::ModelLoadError);
  fs::remove_all(heads);
}
