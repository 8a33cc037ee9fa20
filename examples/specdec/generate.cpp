// `specdec generate`: one method (any of torch/methods.hpp) on a target/draft
// pair, printing the text as it streams, then the Stats and the speedup over
// autoregressive decoding measured in the same run.
#include "generate.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "interrupt.hpp"
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

std::string describe_sampling(const SamplingParams& s) {
  if (s.is_greedy()) return "greedy (temperature 0)";
  return fmt::format("temperature {}, top-k {}, top-p {}, seed {}", s.temperature, s.top_k, s.top_p, s.seed);
}

}  // namespace

std::string methods_listing() {
  std::string out = "Methods (spec name[:key=value]...):\n";
  for (const auto& m : torch_backend::registered_methods()) {
    out += fmt::format("\n  {:<15} {}\n  {:<15} needs: {}{}\n", m.name, m.summary, "",
                       torch_backend::describe(m.models), m.papers.empty() ? "" : "; arXiv " + m.papers);
    for (const auto& p : m.params)
      out += fmt::format("  {:<15}   {:<18} {}\n", "", p.key + "=" + (p.default_value.empty() ? "\"\"" : p.default_value),
                         p.help);
  }
  return out;
}

void add_methods_options(CLI::App& cmd) {
  cmd.callback([] { std::printf("%s", methods_listing().c_str()); });
}

void add_generate_options(CLI::App& cmd, GenerateCommand& g) {
  cmd.add_option("--target", g.target, "target model directory (config.json, model.safetensors)");
  cmd.add_option("--draft", g.draft, "draft model directory (for the draft-model methods)");
  cmd.add_option("--tokenizer", g.tokenizer, "tokenizer.model or tokenizer.json (default: beside --target)");
  cmd.add_option("--method", g.method, "a method spec name[:key=value]...; `specdec methods` lists them")
      ->check([](const std::string& spec) {
        try {
          (void)torch_backend::parse_method(spec);
          return std::string();
        } catch (const Error& e) {
          return std::string(e.what());
        }
      });
  cmd.footer(methods_listing());
  cmd.add_option("--prompt", g.prompt, "prompt text")->required();
  cmd.add_option("--max-new-tokens", g.max_new_tokens, "tokens to generate");
  add_sampling_options(cmd, g.sampling);
  cmd.add_flag("!--no-baseline", g.baseline, "skip the autoregressive run (no speedup figure)");
  cmd.add_option("--threads", g.threads, "CPU threads (0 = all cores)");
  add_dtype_option(cmd, g.dtype);
}

int run_generate(const GenerateCommand& g) {
  catch_interrupt();  // from the start: a Ctrl-C while the models load stops before the first round
  const auto config = torch_backend::parse_method(g.method);
  const auto& info = torch_backend::find_method(config.name);
  const bool needs_draft = info.models == torch_backend::MethodModels::kDraftModel;
  auto s = load_session(g.target, needs_draft ? g.draft : std::filesystem::path{}, g.tokenizer, g.threads, g.dtype);
  auto method = torch_backend::make_method(config, s.target, s.draft ? &*s.draft : nullptr, g.sampling,
                                           g.target.parent_path());
  const auto prompt = s.tokenizer.encode(g.prompt, /*add_bos=*/true);
  const bool uses_head = info.models == torch_backend::MethodModels::kLyannaHead ||
                         info.models == torch_backend::MethodModels::kEagleHead ||
                         info.models == torch_backend::MethodModels::kSpireDraft;
  std::printf("method:    %s (%s)\n", method.name().c_str(), torch_backend::describe_rule(config, g.sampling).c_str());
  std::printf("target:    %s\n", describe_model(g.target, s.target).c_str());
  if (s.draft) std::printf("draft:     %s\n", describe_model(g.draft, *s.draft).c_str());
  if (uses_head)
    std::printf("head:      %s\n",
                (config.text("head").empty() ? g.target.parent_path() / config.name
                                             : std::filesystem::path(config.text("head")))
                    .string()
                    .c_str());
  std::printf("tokenizer: %s: %s, %d pieces\n", s.tokenizer_path.string().c_str(),
              s.tokenizer.kind() == tokenizer::TokenizerKind::kSentencePiece ? "SentencePiece" : "Hugging Face BPE",
              static_cast<int>(s.tokenizer.vocab_size()));
  std::printf("sampling:  %s\n", describe_sampling(g.sampling).c_str());
  std::printf("prompt:    %zu tokens; up to %lld new tokens (stops at EOS or when the context is full)\n\n",
              prompt.size(), static_cast<long long>(g.max_new_tokens));
  GenerationOptions options;
  options.max_new_tokens = g.max_new_tokens;
  options.stop_tokens = {s.tokenizer.eos_id()};
  options.sampling = g.sampling;
  std::optional<AnyDecoder> ar;
  if (g.baseline && config.name != "autoregressive") {
    ar.emplace(torch_backend::make_method(torch_backend::parse_method("autoregressive"), s.target, nullptr, g.sampling));
    // Warm-up, untimed: the first forwards of a model page in its weights and
    // create oneDNN primitives for each row count. Without it the method that
    // runs first pays for both models' cold start and the speedup is skewed.
    GenerationOptions warm = options;
    warm.max_new_tokens = std::min<std::int64_t>(options.max_new_tokens, 16);
    method.generate(prompt, warm);
    ar->generate(prompt, warm);
  }

  auto contention_before = torch_backend::contention_stats();
  std::printf("%s", g.prompt.c_str());
  std::fflush(stdout);
  std::vector<TokenId> generated;
  std::string shown;
  // Stepped here rather than generate(), so that Ctrl-C stops it after the
  // round in flight and what it produced is still reported.
  constexpr AnyDecoder::RequestId kRequest = 0;
  method.begin(kRequest, prompt, options, [&](TokenId t) {
    // Decode the whole continuation each time so multi-byte characters split
    // across byte tokens print correctly; print only what is new.
    generated.push_back(t);
    const auto text = s.tokenizer.decode(generated);
    if (text.size() > shown.size() && text.compare(0, shown.size(), shown) == 0) {
      std::printf("%s", text.c_str() + shown.size());
      std::fflush(stdout);
      shown = text;
    }
  });
  while (!method.done(kRequest) && !interrupted()) method.step();
  const bool stopped = !method.done(kRequest);
  if (stopped) method.abort(kRequest);
  const auto result = method.take_result(kRequest);
  std::printf("\n\n");
  if (stopped)
    std::printf("[interrupted after %zu new tokens: the stats below are of those; no baseline run]\n",
                result.tokens.size());
  std::printf("== %s ==\n", config.name == "autoregressive" ? "autoregressive decoding" : "speculative decoding");
  print_stats(method.name(), result.stats);
  print_contention_note(torch_backend::contention_stats() - contention_before);
  if (stopped) return kInterruptedExit;
  if (ar) {
    contention_before = torch_backend::contention_stats();
    const auto base = ar->generate(prompt, options);
    std::printf("\n== baseline: autoregressive decoding on the target, same prompt and settings ==\n");
    print_stats("autoregressive", base.stats);
    print_contention_note(torch_backend::contention_stats() - contention_before);
    const bool same = base.tokens == result.tokens;
    std::printf("speedup %.2fx over autoregressive decoding (same run)%s\n",
                result.stats.tokens_per_second() / base.stats.tokens_per_second(),
                g.sampling.is_greedy() ? (same ? "; outputs identical" : "; OUTPUTS DIFFER") : "");
  }
  return 0;
}

}  // namespace specdec::cli
