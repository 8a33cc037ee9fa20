#pragma once

#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "specdec/core/sampling_params.hpp"

namespace specdec::cli {

struct GenerateCommand {
  std::filesystem::path target;
  std::filesystem::path tokenizer;  // default: the target directory's tokenizer
  std::string prompt;
  std::int64_t max_new_tokens = 64;
  SamplingParams sampling{0.0f, 0, 1.0f, 0};  // greedy unless asked
  int threads = 0;
};

void add_generate_options(CLI::App& cmd, GenerateCommand& g);
int run_generate(const GenerateCommand& g);

}  // namespace specdec::cli
