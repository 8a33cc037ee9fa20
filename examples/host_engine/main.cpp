// host_engine: a small inference engine that is not specdec's, using specdec
// the way docs/integration.md describes: its own Model (HostLlama, no
// libtorch), its own KV cache and its own request scheduler, calling
// SpeculativeEngine::step for several concurrent requests.
//
//   host_engine [--models DIR] [--method chain|dynamic|ngram|lyanna|duo] [--max-batch N]
//               [--max-new-tokens N] [--] [PROMPT...]
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "generate.hpp"
#include "specdec/tokenizer/tokenizer.hpp"

namespace {

constexpr const char* kUsage =
    "usage: host_engine [--models DIR] [--method chain|dynamic|ngram|lyanna|duo] [--max-batch N]\n"
    "                   [--max-new-tokens N] [--] [PROMPT...]\n"
    "Decodes the prompts (or three built-in ones) as concurrent requests with the chosen method, on the\n"
    "engine's own Llama model, KV cache and scheduler (docs/integration.md).\n";

// A command line host_engine cannot run: main prints it with the usage.
struct UsageError {
  std::string message;
};
[[noreturn]] void usage_error(const std::string& message) { throw UsageError{message}; }

// A whole positive number, or a usage error naming the option.
std::int64_t positive(const std::string& option, const std::string& text) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || v < 1) usage_error(option + " needs a whole number >= 1, got '" + text + "'");
  return v;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string models = "models", method = "chain";
  std::size_t max_batch = 3;
  std::int64_t max_new_tokens = 48;
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
    else if (a == "--method") method = value();
    else if (a == "--max-batch") max_batch = static_cast<std::size_t>(positive(a, value()));
    else if (a == "--max-new-tokens") max_new_tokens = positive(a, value());
    else usage_error("unknown option " + a);
  }
  if (texts.empty()) texts = {"And God said unto Moses", "In the beginning", "The quick brown fox"};
  try {
    host_engine::HostLlama target(models + "/target"), draft(models + "/draft");
    std::optional<host_engine::HostLyannaHead> head;
    if (method == "lyanna") head.emplace(models + "/lyanna", target);
    const auto tokenizer = specdec::tokenizer::Tokenizer::load(models + "/tokenizer.model");
    std::vector<std::vector<specdec::TokenId>> prompts;
    for (const auto& t : texts) prompts.push_back(tokenizer.encode(t, /*add_bos=*/true));
    const auto start = std::chrono::steady_clock::now();
    const auto out = host_engine::generate(target, draft, head ? &*head : nullptr, method, prompts, max_new_tokens, max_batch);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::int64_t tokens = 0;
    for (const auto& [id, r] : out.results) {
      std::printf("[%d] %s%s\n    %lld tokens, %lld rounds, stopped: %s\n", id, texts[static_cast<std::size_t>(id)].c_str(),
                  tokenizer.decode(r.tokens).c_str(), static_cast<long long>(r.tokens.size()),
                  static_cast<long long>(r.stats.rounds()), specdec::to_string(r.stop_reason));
      tokens += static_cast<std::int64_t>(r.tokens.size());
    }
    std::printf("%s: %zu requests, at most %zu at once, %lld steps (one target forward each), %lld tokens in %.2f s\n",
                method.c_str(), prompts.size(), out.peak_batch, static_cast<long long>(out.steps),
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
