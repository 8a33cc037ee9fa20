// host_engine: a small inference engine that is not specdec's, using specdec
// the way docs/integration.md describes: its own Model (HostLlama, no
// libtorch), its own KV cache and its own request scheduler, calling
// SpeculativeEngine::step for several concurrent requests.
//
//   host_engine [--models DIR] [--method chain|dynamic|ngram|lyanna|duo] [--max-batch N]
//               [--max-new-tokens N] PROMPT...
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "generate.hpp"
#include "specdec/tokenizer/tokenizer.hpp"

int main(int argc, char** argv) {
  std::string models = "models", method = "chain";
  std::size_t max_batch = 3;
  std::int64_t max_new_tokens = 48;
  std::vector<std::string> texts;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "host_engine: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--models") models = value();
    else if (a == "--method") method = value();
    else if (a == "--max-batch") max_batch = std::stoul(value());
    else if (a == "--max-new-tokens") max_new_tokens = std::stoll(value());
    else texts.push_back(a);
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
}
