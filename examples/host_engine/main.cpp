// host_engine: a small inference engine that is not specdec's, using specdec
// the way docs/integration.md describes: its own Model (HostLlama, no
// libtorch), its own KV cache and its own request scheduler, stepping any
// method specdec's registry builds by name, several requests at once.
//
//   host_engine [--models DIR] [--method SPEC] [--list] [--max-batch N] [--max-new-tokens N]
//               [--temperature T [--top-p P] [--mixed]] [--] [PROMPT...]
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "methods.hpp"
#include "scheduler.hpp"
#include "specdec/tokenizer/tokenizer.hpp"

namespace {

constexpr const char* kUsage =
    "usage: host_engine [--models DIR] [--method SPEC] [--list] [--max-batch N] [--max-new-tokens N]\n"
    "                   [--temperature T [--top-p P] [--mixed]] [--] [PROMPT...]\n"
    "Decodes the prompts (or three built-in ones) as concurrent requests with the method SPEC\n"
    "(name[:key=value]..., default chain; --list shows them), on the engine's own Llama model,\n"
    "KV cache and scheduler (docs/integration.md). Requests are greedy unless --temperature is\n"
    "given; with --mixed every other request stays greedy, in the same steps.\n";

// A command line host_engine cannot run: main prints it with the usage.
struct UsageError {
  std::string message;
};
[[noreturn]] void usage_error(const std::string& message) { throw UsageError{message}; }

// A number of the option's kind, or a usage error naming the option.
template <class T>
T number(const std::string& option, const std::string& text, T least) {
  std::size_t used = 0;
  T v{};
  try {
    if constexpr (std::is_floating_point_v<T>)
      v = static_cast<T>(std::stod(text, &used));
    else
      v = static_cast<T>(std::stoll(text, &used));
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || v < least) {
    if constexpr (std::is_floating_point_v<T>)
      usage_error(option + " needs a number >= " + std::to_string(least) + ", got '" + text + "'");
    else
      usage_error(option + " needs a whole number >= " + std::to_string(least) + ", got '" + text + "'");
  }
  return v;
}

void list_methods(const specdec::MethodRegistry<host_engine::HostLlama>& registry) {
  for (const auto& m : registry.methods()) {
    std::printf("%-15s %s (%s%s)\n", m.name.c_str(), m.summary.c_str(), specdec::describe(m.models),
                m.papers.empty() ? "" : ("; arXiv " + m.papers).c_str());
    for (const auto& p : m.params)
      std::printf("    %-14s = %-6s %s\n", p.key.c_str(), p.default_value.c_str(), p.help.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) try {
  std::string models = "models", method_spec = "chain";
  std::size_t max_batch = 3;
  std::int64_t max_new_tokens = 48;
  specdec::SamplingParams sampling{0.0f};
  bool mixed = false, list = false;
  std::vector<std::string> texts;
  bool options_done = false;  // after "--", everything is a prompt
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    if (options_done || a.empty() || a[0] != '-') texts.push_back(a);
    else if (a == "--") options_done = true;
    else if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--models") models = value();
    else if (a == "--method") method_spec = value();
    else if (a == "--list") list = true;
    else if (a == "--max-batch") max_batch = number<std::size_t>(a, value(), 1);
    else if (a == "--max-new-tokens") max_new_tokens = number<std::int64_t>(a, value(), 1);
    else if (a == "--temperature") sampling.temperature = number<float>(a, value(), 0.0f);
    else if (a == "--top-p") sampling.top_p = number<float>(a, value(), 0.0f);
    else if (a == "--mixed") mixed = true;
    else usage_error("unknown option " + a);
  }
  if (mixed && sampling.is_greedy()) usage_error("--mixed needs --temperature above 0");
  if (texts.empty()) texts = {"And God said unto Moses", "In the beginning", "The quick brown fox"};
  try {
    const auto registry = host_engine::method_registry();
    if (list) {
      list_methods(registry);
      return 0;
    }
    const auto config = registry.parse(method_spec);
    const bool needs_draft = registry.find(config.name).models == specdec::MethodModels::kDraftModel;
    host_engine::HostLlama target(models + "/target");
    std::unique_ptr<host_engine::HostLlama> draft;
    if (needs_draft) draft = std::make_unique<host_engine::HostLlama>(models + "/draft");
    // The method is set up for the sampled requests when there are any
    // (rule=auto verifies them, and greedy ones, with recursive rejection sampling).
    auto method = registry.make(config, target, draft.get(), sampling, models);
    const auto tokenizer = specdec::tokenizer::Tokenizer::load(models + "/tokenizer.model");
    std::vector<std::vector<specdec::TokenId>> prompts;
    std::vector<specdec::GenerationOptions> options;
    for (const auto& t : texts) {
      prompts.push_back(tokenizer.encode(t, /*add_bos=*/true));
      auto& o = options.emplace_back();
      o.max_new_tokens = max_new_tokens;
      const bool greedy = mixed && options.size() % 2 == 0;
      if (!greedy) o.sampling = sampling;
      o.sampling.seed = options.size();
    }
    std::printf("method: %s (%s)\n", method.name().c_str(), registry.describe_rule(config, sampling).c_str());
    const auto start = std::chrono::steady_clock::now();
    const auto out = host_engine::run_requests(method, prompts, options, max_batch);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::int64_t tokens = 0;
    for (const auto& [id, r] : out.results) {
      const auto& s = options[static_cast<std::size_t>(id)].sampling;
      std::printf("[%d] (%s) %s%s\n    %lld tokens, %lld rounds, stopped: %s\n", id,
                  s.is_greedy() ? "greedy" : ("T " + std::to_string(s.temperature)).c_str(),
                  texts[static_cast<std::size_t>(id)].c_str(), tokenizer.decode(r.tokens).c_str(),
                  static_cast<long long>(r.tokens.size()), static_cast<long long>(r.stats.rounds()),
                  specdec::to_string(r.stop_reason));
      tokens += static_cast<std::int64_t>(r.tokens.size());
    }
    std::printf("%s: %zu requests, at most %zu at once, %lld steps (one target forward each), %lld tokens in %.2f s\n",
                method.name().c_str(), prompts.size(), out.peak_batch, static_cast<long long>(out.steps),
                static_cast<long long>(tokens), seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "host_engine: error: %s\n", e.what());
    return 2;
  }
  return 0;
} catch (const UsageError& e) {
  std::fprintf(stderr, "host_engine: %s\n%s", e.message.c_str(), kUsage);
  return 2;
}
