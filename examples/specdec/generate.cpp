// `specdec generate`: autoregressive generation with a Hugging Face-layout
// checkpoint, printing the continuation, tokens/s and time to first token.
#include "generate.hpp"

#include <ATen/Parallel.h>

#include <cstdio>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/tokenizer/tokenizer.hpp"
#include "specdec/torch/autoregressive.hpp"
#include "specdec/torch/llama_model.hpp"

namespace specdec::cli {
namespace {

std::filesystem::path find_tokenizer(const std::filesystem::path& dir) {
  for (const char* name : {"tokenizer.model", "tokenizer.json"})
    if (std::filesystem::exists(dir / name)) return dir / name;
  throw ModelLoadError(fmt::format("{}: no tokenizer.model or tokenizer.json (pass --tokenizer)", dir.string()));
}

}  // namespace

void add_generate_options(CLI::App& cmd, GenerateCommand& g) {
  cmd.add_option("--target", g.target, "target model directory (config.json, model.safetensors, tokenizer)")
      ->required();
  cmd.add_option("--tokenizer", g.tokenizer, "tokenizer.model or tokenizer.json (default: in --target)");
  cmd.add_option("--prompt", g.prompt, "prompt text")->required();
  cmd.add_option("--max-new-tokens", g.max_new_tokens, "tokens to generate");
  cmd.add_option("--temperature", g.sampling.temperature, "0 = greedy");
  cmd.add_option("--top-k", g.sampling.top_k, "0 = off");
  cmd.add_option("--top-p", g.sampling.top_p, "1 = off");
  cmd.add_option("--seed", g.sampling.seed, "sampling seed");
  cmd.add_option("--threads", g.threads, "CPU threads (0 = all cores)");
}

int run_generate(const GenerateCommand& g) {
  if (g.threads > 0) at::set_num_threads(g.threads);
  const auto tokenizer_path = g.tokenizer.empty() ? find_tokenizer(g.target) : g.tokenizer;
  const auto tokenizer = tokenizer::Tokenizer::load(tokenizer_path);
  auto model = torch_backend::LlamaModel::load(g.target);
  model.check_tokenizer_vocab(tokenizer.vocab_size(), tokenizer_path.string());
  const auto prompt = tokenizer.encode(g.prompt, /*add_bos=*/true);
  torch_backend::GenerateOptions options;
  options.max_new_tokens = g.max_new_tokens;
  options.sampling = g.sampling;
  options.stop_tokens = {tokenizer.eos_id()};
  std::printf("%s", g.prompt.c_str());
  std::fflush(stdout);
  std::vector<TokenId> generated;
  std::string shown;
  const auto result = torch_backend::generate_autoregressive(model, 0, prompt, options, [&](TokenId t) {
    // Decode the whole continuation each time so multi-byte characters split
    // across byte tokens print correctly; print only what is new.
    generated.push_back(t);
    const auto text = tokenizer.decode(generated);
    if (text.size() > shown.size() && text.compare(0, shown.size(), shown) == 0) {
      std::printf("%s", text.c_str() + shown.size());
      std::fflush(stdout);
      shown = text;
    }
  });
  std::printf("\n\n[autoregressive] %zu tokens | %.1f tokens/s | time to first token %.1f ms%s\n",
              result.tokens.size(), result.tokens_per_second, result.time_to_first_token_ms,
              result.stopped ? " | stopped at end of sequence" : "");
  return 0;
}

}  // namespace specdec::cli
