#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace specdec::cli {

struct SequoiaCommand {
  std::filesystem::path target = "models/target";
  std::filesystem::path draft = "models/draft";
  std::filesystem::path tokenizer;
  std::vector<std::filesystem::path> prompt_sets;
  std::int64_t num_prompts = 10;
  std::int64_t max_new_tokens = 64;
  std::int32_t width = 8;    // children measured per accepted node
  std::int32_t depth = 4;    // depth of the measuring tree
  std::int32_t budget = 16;  // nodes of the tree to build from the measured vector
  std::int32_t max_depth = 6;
  int threads = 0;
  std::string dtype = "auto";  // --dtype: the inference weights' precision
};

void add_sequoia_options(CLI::App& cmd, SequoiaCommand& s);
int run_sequoia(const SequoiaCommand& s);

}  // namespace specdec::cli
