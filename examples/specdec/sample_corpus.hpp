#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "specdec/core/sampling_params.hpp"

namespace specdec::cli {

struct SampleCorpusCommand {
  std::filesystem::path model = "models/target";
  std::filesystem::path tokenizer;  // default: in the model directory or its parent
  std::filesystem::path tokens;     // uint16 token file the prompts are cut from
  std::filesystem::path out;        // the corpus text, in scripts/corpus/'s format
  std::int64_t samples = 1024;
  std::int64_t prompt_tokens = 32;
  std::int64_t new_tokens = 224;
  std::int64_t batch = 32;
  std::int64_t chunk = 256;  // samples between saves of the output
  SamplingParams sampling{1.0f, 0, 1.0f, 1};
  int threads = 0;
  std::string dtype = "auto";
};

void add_sample_corpus_options(CLI::App& cmd, SampleCorpusCommand& c);
int run_sample_corpus(const SampleCorpusCommand& c);

}  // namespace specdec::cli
