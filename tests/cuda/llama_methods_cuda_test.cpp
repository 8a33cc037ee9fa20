// The method registry over the CUDA model (cuda/llama_methods.hpp): every
// method built by name on cuda::LlamaModel decodes greedily exactly as
// autoregressive decoding does on it, with rule=auto (greedy acceptance on
// the device for the TargetVerifier recipes) and with rule=rrs and
// rule=traversal. The listing needs no device; the decoding tests WARN and
// pass without one.
#include <cuda_runtime.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "device_support.hpp"
#include "specdec/cuda/llama_methods.hpp"
#include "support/catch.hpp"
#include "support/reference_llama.hpp"

namespace sd = specdec;
using sd::TokenId;

namespace {

sd::io::LlamaConfig config(std::int64_t hidden, std::int64_t layers) {
  return sd::testing::tiny_llama_config(hidden, 2 * hidden, layers);
}

std::filesystem::path saved(const sd::testing::ReferenceLlama& m, const char* name) {
  const auto dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(dir);
  m.save(dir);
  return dir;
}

}  // namespace

TEST_CASE("The CUDA registry lists the standard methods", "[unit]") {
  std::vector<std::string> names;
  for (const auto& m : sd::cuda::method_registry().methods()) names.push_back(m.name);
  CHECK(names == std::vector<std::string>{"autoregressive", "chain", "tree", "dynamic", "sequoia", "ngram",
                                          "suffix", "magicdec", "duo", "sv", "slem", "tli"});
}

TEST_CASE("Every method on the CUDA model decodes greedily as autoregressive decoding does", "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  // A target and a smaller draft that agrees with it now and then.
  auto target =
      sd::cuda::LlamaModel::load(saved(sd::testing::ReferenceLlama(config(64, 2), 21, true), "specdec_m_t"));
  const auto draft_dir = saved(sd::testing::ReferenceLlama(config(32, 1), 22, true), "specdec_m_d");
  auto draft = sd::cuda::LlamaModel::load(draft_dir);
  const auto& registry = sd::cuda::method_registry();
  sd::SamplingParams greedy;
  greedy.temperature = 0.0f;
  sd::GenerationOptions options;
  options.max_new_tokens = 48;
  options.sampling = greedy;
  // A prompt that repeats itself, so that n-gram lookup finds drafts;
  // magicdec's window is short, so its draft evicts within the 48 tokens. (duo
  // gets its draft length: measuring its cost coefficient needs a context
  // of 129 tokens, these models have 128. sv gets the draft's checkpoint as
  // its companion, and verifies every draft: there is no acceptance profile
  // of these models.)
  const std::vector<TokenId> prompt = {5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6};
  const auto want = registry.make("autoregressive", target, nullptr, greedy).generate(prompt, options).tokens;
  REQUIRE(want.size() == 48);
  const std::string sv = "sv:all=1:lat_batch=1:lat_reps=1:companion=" + draft_dir.string();
  for (const std::string spec :
       {"chain", "chain:rule=rrs", "chain:rule=block", "tree", "tree:rule=traversal", "dynamic",
        "sequoia:p=0.5,0.2,0.1:total=8:depth=3", "ngram", "suffix", "magicdec:sink=1:window=8",
        "magicdec:k=3:sink=2:window=6:positions=text", "duo:gamma=4", sv.c_str()}) {
    INFO(spec);
    const auto info = registry.find(spec.substr(0, spec.find(':')));
    auto decoder =
        registry.make(spec, target, info.models == sd::MethodModels::kDraftModel ? &draft : nullptr, greedy);
    CHECK(decoder.generate(prompt, options).tokens == want);
  }
}
