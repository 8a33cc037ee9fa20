// `specdec generate --device cpu`: the libtorch models and registry
// (torch/methods.hpp).
#include <optional>
#include <string>

#include <fmt/format.h>

#include "generate.hpp"
#include "session.hpp"
#include "specdec/torch/methods.hpp"

namespace specdec::cli {
namespace {

// "models/target: 21.8M parameters, 6 layers, context 1024, stored float16, weights bf16 (f32 activations)"
std::string describe_model(const std::filesystem::path& dir, const torch_backend::LlamaModel& m) {
  const auto& c = m.config();
  return fmt::format(
      "{}: {:.1f}M parameters, {} layers, hidden {}, context {}, stored {}, weights {} (f32 activations)",
      dir.string(), static_cast<double>(m.num_parameters()) / 1e6, c.num_hidden_layers, c.hidden_size,
      c.max_position_embeddings, c.torch_dtype.empty() ? "float32" : c.torch_dtype,
      torch_backend::inference_dtype_name(m.inference_dtype()));
}

}  // namespace

std::vector<ListedMethod> torch_methods() {
  return list_methods(torch_backend::method_registry());
}

int generate_on_torch(const GenerateCommand& g) {
  const auto config = torch_backend::parse_method(g.method);
  const auto& info = torch_backend::find_method(config.name);
  const bool needs_draft = info.models == torch_backend::MethodModels::kDraftModel;
  auto s = load_session(g.target, needs_draft ? g.draft : std::filesystem::path{}, g.tokenizer, g.threads,
                        g.dtype);
  auto method = torch_backend::make_method(config, s.target, s.draft ? &*s.draft : nullptr, g.sampling,
                                           g.target.parent_path());
  std::optional<AnyDecoder> ar;
  if (g.baseline && config.name != "autoregressive")
    ar.emplace(torch_backend::make_method(torch_backend::parse_method("autoregressive"), s.target, nullptr,
                                          g.sampling));
  GenerationRun run{method, ar ? &*ar : nullptr, s.tokenizer, s.tokenizer_path, {}, {}, {}};
  run.loaded.push_back(
      fmt::format("method:    {} ({})", method.name(), torch_backend::describe_rule(config, g.sampling)));
  run.loaded.push_back("target:    " + describe_model(g.target, s.target));
  if (s.draft) run.loaded.push_back("draft:     " + describe_model(g.draft, *s.draft));
  if (info.models == torch_backend::MethodModels::kLyannaHead ||
      info.models == torch_backend::MethodModels::kEagleHead ||
      info.models == torch_backend::MethodModels::kSpireDraft)
    run.loaded.push_back("head:      " + (config.text("head").empty()
                                              ? g.target.parent_path() / config.name
                                              : std::filesystem::path(config.text("head")))
                                             .string());
  cpu::ContentionStats before;
  run.before_timed = [&] { before = cpu::contention_stats(); };
  run.after_timed = [&] { print_contention_note(cpu::contention_stats() - before); };
  return stream_generation(run, g);
}

}  // namespace specdec::cli
