// A host Model that misbehaves: a NaN or +inf logit, or a row of -inf only,
// is refused with InvalidDistributionError before anything samples from it,
// whether the target verifies greedily or by sampling, and whether the draft
// model or the target made it; rows written narrower or wider than the
// vocabulary the model reports are a ShapeError (docs/hostile_inputs.md).
#include <cstdint>
#include <limits>
#include <vector>

#include "specdec/accept/greedy.hpp"
#include "specdec/core/error.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/autoregressive_decoder.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "support/catch.hpp"
#include "specdec/testing/hashed_context_model.hpp"

namespace sd = specdec;
using sd::testing::HashedContextModel;

namespace {

constexpr std::int64_t kVocab = 20;

enum class Poison { kNaN, kInf, kAllMasked };

// The test model, but the last row of every forward's logits carries the
// poison (at token 3, or all of it).
class PoisonedModel : public HashedContextModel {
 public:
  explicit PoisonedModel(Poison poison) : HashedContextModel(kVocab, 1), poison_(poison) {}
  void forward(const sd::ForwardRequest& request) {
    HashedContextModel::forward(request);
    if (request.logits.empty()) return;
    float* row = request.logits.data_as<float>() + (request.logits.size(0) - 1) * kVocab;
    switch (poison_) {
      case Poison::kNaN: row[3] = std::numeric_limits<float>::quiet_NaN(); break;
      case Poison::kInf: row[3] = std::numeric_limits<float>::infinity(); break;
      case Poison::kAllMasked:
        for (std::int64_t i = 0; i < kVocab; ++i) row[i] = -std::numeric_limits<float>::infinity();
        break;
    }
  }

 private:
  Poison poison_;
};

// The test model, but it writes its logits as rows of kVocab + delta floats
// (delta = -1: narrower, +1: wider) while it reports kVocab: a host model
// whose LM head and vocab_size() disagree.
class WrongWidthModel : public HashedContextModel {
 public:
  explicit WrongWidthModel(std::int64_t delta) : HashedContextModel(kVocab, 1), delta_(delta) {}
  void forward(const sd::ForwardRequest& request) {
    if (request.logits.empty()) return HashedContextModel::forward(request);
    const auto rows = request.logits.size(0);
    std::vector<float> right(static_cast<std::size_t>(rows * kVocab));
    sd::ForwardRequest mine = request;
    mine.logits = sd::TensorView(right.data(), sd::DType::kF32, {rows, kVocab});
    HashedContextModel::forward(mine);
    const auto width = kVocab + delta_;
    float* out = request.logits.data_as<float>();
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t i = 0; i < width; ++i) out[r * width + i] = i < kVocab ? right[r * kVocab + i] : 1.0f;
  }

 private:
  std::int64_t delta_;
};

// Begins a greedy chain request whose drafts come from `draft` (the target
// is sound) and takes its first step.
template <class DraftModel>
void first_step_drafting_with(DraftModel& draft) {
  using Drafter = sd::ModelDrafter<DraftModel>;
  using Verifier = sd::ModelVerifier<HashedContextModel>;
  using Engine = sd::SpeculativeEngine<Drafter, sd::ChainBuilder, Verifier, sd::GreedyAcceptance, sd::FixedLength>;
  HashedContextModel target(kVocab, 1);
  Verifier verifier(target);
  Engine engine(sd::ChainBuilder{}, verifier, sd::GreedyAcceptance{});
  Drafter drafter(draft, 0);
  sd::FixedLength policy = sd::FixedLength::chain(3);
  sd::GenerationOptions o;
  o.max_new_tokens = 8;
  typename Engine::Request r(0, drafter, policy, o);
  engine.begin(r, std::vector<sd::TokenId>{1, 2, 3});
  engine.step(r);
}

const char* what_it_says(Poison p) { return p == Poison::kAllMasked ? "-inf" : p == Poison::kNaN ? "nan" : "inf"; }

}  // namespace

TEST_CASE("A target whose logits hold NaN, +inf or only -inf is refused, greedy or sampled", "[unit][engine]") {
  for (const Poison poison : {Poison::kNaN, Poison::kInf, Poison::kAllMasked})
    for (const float temperature : {0.0f, 0.8f}) {
      CAPTURE(static_cast<int>(poison), temperature);
      PoisonedModel target(poison);
      sd::AutoregressiveDecoder<PoisonedModel> decoder(target);
      sd::GenerationOptions o;
      o.max_new_tokens = 4;
      o.sampling.temperature = temperature;
      const std::vector<sd::TokenId> prompt = {1, 2, 3};
      CHECK_THROWS_AS(decoder.generate(prompt, o), sd::InvalidDistributionError);
      CHECK_THROWS_WITH(decoder.generate(prompt, o), Catch::Contains(what_it_says(poison)));
    }
}

TEST_CASE("A draft model whose logits hold NaN, +inf or only -inf is refused", "[unit][engine]") {
  for (const Poison poison : {Poison::kNaN, Poison::kInf, Poison::kAllMasked}) {
    CAPTURE(static_cast<int>(poison));
    PoisonedModel draft(poison);
    CHECK_THROWS_AS(first_step_drafting_with(draft), sd::InvalidDistributionError);
  }
}

TEST_CASE("A target or draft model writing rows of another width than its vocabulary is refused",
          "[unit][engine]") {
  for (const std::int64_t delta : {-1, 1}) {
    CAPTURE(delta);
    const char* says = delta < 0 ? "unwritten" : "past the end";
    {  // the target, read by ModelVerifier
      WrongWidthModel target(delta);
      sd::AutoregressiveDecoder<WrongWidthModel> decoder(target);
      sd::GenerationOptions o;
      o.max_new_tokens = 4;
      const std::vector<sd::TokenId> prompt = {1, 2, 3};
      CHECK_THROWS_AS(decoder.generate(prompt, o), sd::ShapeError);
      CHECK_THROWS_WITH(decoder.generate(prompt, o),
                        Catch::Contains(says) && Catch::Contains("ModelVerifier"));
    }
    WrongWidthModel draft(delta);  // the draft, read by ModelDrafter
    CHECK_THROWS_WITH(first_step_drafting_with(draft), Catch::Contains(says) && Catch::Contains("ModelDrafter"));
  }
}
