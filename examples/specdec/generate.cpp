// `specdec generate`: one method on a target/draft pair, on the CPU (libtorch)
// or a CUDA device, printing the text as it streams, then the Stats and the
// speedup over autoregressive decoding measured in the same run. The models
// and registries are the backends' (generate_torch.cpp, generate_cuda.cpp);
// what is here runs with either.
#include "generate.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "common.hpp"
#include "interrupt.hpp"
#include "specdec/core/error.hpp"

namespace specdec::cli {
namespace {

// The devices this build runs models on, with their registries.
struct DeviceMethods {
  const char* device;
  std::vector<ListedMethod> methods;
};
std::vector<DeviceMethods> devices() {
  std::vector<DeviceMethods> out;
#if SPECDEC_CLI_WITH_TORCH
  out.push_back({"cpu", torch_methods()});
#endif
#if SPECDEC_CLI_WITH_CUDA
  out.push_back({"cuda", cuda_methods()});
#endif
  return out;
}

std::string describe_sampling(const SamplingParams& s) {
  if (s.is_greedy()) return "greedy (temperature 0)";
  return fmt::format("temperature {}, top-k {}, top-p {}, seed {}", s.temperature, s.top_k, s.top_p, s.seed);
}

}  // namespace

std::string methods_listing() {
  // Each method once, in the first device's order, with the devices that run
  // it; a parameter only some of them take (the CPU's hot=) names those.
  struct Param {
    MethodParam param;
    std::string devices;
  };
  struct Entry {
    ListedMethod method;
    std::string devices;
    std::vector<Param> params;
  };
  std::vector<Entry> entries;
  for (const auto& d : devices())
    for (const auto& m : d.methods) {
      auto it = std::find_if(entries.begin(), entries.end(),
                             [&](const Entry& e) { return e.method.name == m.name; });
      if (it == entries.end()) it = entries.insert(entries.end(), Entry{m, "", {}});
      it->devices += (it->devices.empty() ? "" : ", ") + std::string(d.device);
      for (const auto& p : m.params) {
        auto q = std::find_if(it->params.begin(), it->params.end(),
                              [&](const Param& x) { return x.param.key == p.key; });
        if (q == it->params.end()) q = it->params.insert(it->params.end(), Param{p, ""});
        q->devices += (q->devices.empty() ? "" : ", ") + std::string(d.device);
      }
    }
  std::string out = "Methods (spec name[:key=value]...):\n";
  for (const auto& e : entries) {
    const auto& m = e.method;
    out += fmt::format("\n  {:<15} {}\n  {:<15} needs: {}{}; runs on: {}\n", m.name, m.summary, "", m.needs,
                       m.papers.empty() ? "" : "; arXiv " + m.papers, e.devices);
    for (const auto& [p, on] : e.params)
      out += fmt::format("  {:<15}   {:<18} {}{}\n", "",
                         p.key + "=" + (p.default_value.empty() ? "\"\"" : p.default_value), p.help,
                         on == e.devices ? "" : " (" + on + " only)");
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
  cmd.add_option("--method", g.method, "a method spec name[:key=value]...; `specdec methods` lists them");
  cmd.footer(methods_listing());
  cmd.add_option("--prompt", g.prompt, "prompt text")->required();
  cmd.add_option("--max-new-tokens", g.max_new_tokens, "tokens to generate");
  add_sampling_options(cmd, g.sampling);
  cmd.add_flag("!--no-baseline", g.baseline, "skip the autoregressive run (no speedup figure)");
  cmd.add_option("--threads", g.threads, "CPU threads (0 = all cores)");
  add_dtype_option(cmd, g.dtype);
  add_device_option(cmd, g.device);
}

void check_method_device(const std::string& spec, const std::string& device) {
  const auto name = spec.substr(0, spec.find(':'));
  const auto runs = [&](const DeviceMethods& d) {
    return std::any_of(d.methods.begin(), d.methods.end(),
                       [&](const ListedMethod& m) { return m.name == name; });
  };
  std::string on;  // the devices that run it
  bool here = false;
  for (const auto& d : devices()) {
    if (!runs(d)) continue;
    on += (on.empty() ? "" : ", ") + std::string(d.device);
    here |= d.device == device;
  }
  if (!here && !on.empty())
    throw InvalidArgumentError(
        fmt::format("method {} does not run on {} (it runs on {}; `specdec methods` says where each runs)",
                    name, device, on));
}

int run_generate(const GenerateCommand& g) {
  catch_interrupt();  // from the start: a Ctrl-C while the models load stops before the first round
  check_device("", g.device);
  check_method_device(g.method, g.device);
#if SPECDEC_CLI_WITH_TORCH
  if (g.device == "cpu") return generate_on_torch(g);
#endif
#if SPECDEC_CLI_WITH_CUDA
  if (g.device == "cuda") return generate_on_cuda(g);
#endif
  return 2;  // not reached: check_device refused it
}

int stream_generation(GenerationRun& run, const GenerateCommand& g) {
  auto& method = run.method;
  const auto& tok = run.tokenizer;
  const auto prompt = tok.encode(g.prompt, /*add_bos=*/true);
  for (const auto& line : run.loaded) std::printf("%s\n", line.c_str());
  std::printf("tokenizer: %s: %s, %d pieces\n", run.tokenizer_path.string().c_str(),
              tok.kind() == tokenizer::TokenizerKind::kSentencePiece ? "SentencePiece" : "Hugging Face BPE",
              static_cast<int>(tok.vocab_size()));
  std::printf("sampling:  %s\n", describe_sampling(g.sampling).c_str());
  std::printf("prompt:    %zu tokens; up to %lld new tokens (stops at EOS or when the context is full)\n\n",
              prompt.size(), static_cast<long long>(g.max_new_tokens));
  GenerationOptions options;
  options.max_new_tokens = g.max_new_tokens;
  options.stop_tokens = {tok.eos_id()};
  options.sampling = g.sampling;
  const auto before = [&] {
    if (run.before_timed) run.before_timed();
  };
  const auto after = [&] {
    if (run.after_timed) run.after_timed();
  };
  if (run.baseline) {
    // Warm-up, untimed: the first forwards of a model page in its weights
    // (and, on the CPU, create oneDNN primitives for each row count; on a GPU,
    // load the kernels). Without it the method that runs first pays for both
    // models' cold start and the speedup is skewed.
    GenerationOptions warm = options;
    warm.max_new_tokens = std::min<std::int64_t>(options.max_new_tokens, 16);
    method.generate(prompt, warm);
    run.baseline->generate(prompt, warm);
  }

  before();
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
    const auto text = tok.decode(generated);
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
  const bool autoregressive = g.method.substr(0, g.method.find(':')) == "autoregressive";
  std::printf("== %s ==\n", autoregressive ? "autoregressive decoding" : "speculative decoding");
  print_stats(method.name(), result.stats);
  after();
  if (stopped) return kInterruptedExit;
  if (run.baseline) {
    before();
    const auto base = run.baseline->generate(prompt, options);
    std::printf("\n== baseline: autoregressive decoding on the target, same prompt and settings ==\n");
    print_stats("autoregressive", base.stats);
    after();
    const bool same = base.tokens == result.tokens;
    std::printf("speedup %.2fx over autoregressive decoding (same run)%s\n",
                result.stats.tokens_per_second() / base.stats.tokens_per_second(),
                g.sampling.is_greedy() ? (same ? "; outputs identical" : "; OUTPUTS DIFFER") : "");
  }
  return 0;
}

}  // namespace specdec::cli
