#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "specdec/core/sampling_params.hpp"

namespace specdec::cli {

struct GenerateCommand {
  std::filesystem::path target = "models/target";
  std::filesystem::path draft = "models/draft";  // loaded for the draft-model methods
  std::filesystem::path tokenizer;  // default: in the target directory or its parent
  std::string method = "chain";     // see torch/methods.hpp
  std::string prompt;
  std::int64_t max_new_tokens = 64;
  SamplingParams sampling{0.0f, 0, 1.0f, 0};  // greedy unless asked
  bool baseline = true;  // also run autoregressive decoding for the speedup
  int threads = 0;
  std::string dtype = "auto";  // --dtype: the inference weights' precision
};

void add_generate_options(CLI::App& cmd, GenerateCommand& g);
// `specdec methods`: every registered method with its parameters.
void add_methods_options(CLI::App& cmd);
std::string methods_listing();
int run_generate(const GenerateCommand& g);

}  // namespace specdec::cli
