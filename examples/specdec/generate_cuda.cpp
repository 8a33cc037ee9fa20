// `specdec generate --device cuda`: the CUDA models (cuda/llama_model.hpp) and
// their registry (cuda/llama_methods.hpp), on device 0. Needs no libtorch:
// a build without it (SPECDEC_WITH_TORCH=OFF) has this device only.
#include <optional>
#include <string>

#include <fmt/format.h>

#include "common.hpp"
#include "generate.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/tensor_view.hpp"
#include "specdec/cuda/chain_speculative_sampling.hpp"  // cuda_device_count
#include "specdec/cuda/llama_methods.hpp"

namespace specdec::cli {
namespace {

cuda::LlamaModel load_model(const std::filesystem::path& dir, DType weights, const tokenizer::Tokenizer& tok,
                            const std::filesystem::path& tok_path) {
  auto m = cuda::LlamaModel::load(dir, weights);
  if (m.vocab_size() != static_cast<std::int64_t>(tok.vocab_size()))
    throw ShapeError(fmt::format("{}: tokenizer vocabulary size {} differs from the model's ({}, {})",
                                 tok_path.string(), tok.vocab_size(), dir.string(), m.vocab_size()));
  return m;
}

// "models/target: 21.8M parameters, 6 layers, hidden 512, context 1024, weights bf16 on cuda:0 (f32
// activations)"
std::string describe_model(const std::filesystem::path& dir, const cuda::LlamaModel& m) {
  const auto& c = m.config();
  return fmt::format(
      "{}: {:.1f}M parameters, {} layers, hidden {}, context {}, weights {} on cuda:{} (f32 activations)",
      dir.string(), static_cast<double>(m.num_parameters()) / 1e6, c.num_hidden_layers, c.hidden_size,
      c.max_position_embeddings, dtype_name(m.weight_dtype()), m.device().index);
}

}  // namespace

DType cuda_weights_dtype(const std::string& dtype) {
  if (dtype == "auto" || dtype == "bf16") return DType::kBF16;
  if (dtype == "f32") return DType::kF32;
  throw InvalidArgumentError(fmt::format("--dtype {}: on cuda give auto, bf16 or f32", dtype));
}

void require_cuda_device() {
  int devices = 0;
  if (cuda::cuda_device_count(&devices) != Status::kOk || devices == 0)
    throw DeviceError(
        "--device cuda: no CUDA device is visible to this process (no driver, or "
        "CUDA_VISIBLE_DEVICES empty)");
}

std::vector<ListedMethod> cuda_methods() {
  return list_methods(cuda::method_registry());
}

int generate_on_cuda(const GenerateCommand& g) {
  const auto& registry = cuda::method_registry();
  const auto config = registry.parse(g.method);  // a wrong spec is said before anything loads
  const auto& info = registry.find(config.name);
  const auto weights = cuda_weights_dtype(g.dtype);
  if (g.threads != 0)
    throw InvalidArgumentError("--threads sets the CPU's forward threads; on cuda the models run on the GPU");
  require_cuda_device();
  const auto tok_path = tokenizer_path(g.target, g.tokenizer);
  const auto tok = tokenizer::Tokenizer::load(tok_path);
  auto target = load_model(g.target, weights, tok, tok_path);
  std::optional<cuda::LlamaModel> draft;
  if (info.models == MethodModels::kDraftModel) {
    if (g.tokenizer.empty()) check_draft_tokenizer(g.draft, tok_path);
    draft.emplace(load_model(g.draft, weights, tok, tok_path));
  }
  auto method = registry.make(config, target, draft ? &*draft : nullptr, g.sampling, g.target.parent_path());
  std::optional<AnyDecoder> ar;
  if (g.baseline && config.name != "autoregressive")
    ar.emplace(registry.make(registry.parse("autoregressive"), target, nullptr, g.sampling));
  GenerationRun run{method, ar ? &*ar : nullptr, tok, tok_path, {}, {}, {}};
  run.loaded.push_back(
      fmt::format("method:    {} ({})", method.name(), registry.describe_rule(config, g.sampling)));
  run.loaded.push_back("target:    " + describe_model(g.target, target));
  if (draft) run.loaded.push_back("draft:     " + describe_model(g.draft, *draft));
  return stream_generation(run, g);
}

}  // namespace specdec::cli
