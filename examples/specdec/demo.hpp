#pragma once

#include <cstdint>

#include <CLI/CLI.hpp>

namespace specdec::cli {

struct DemoOptions {
  std::int64_t vocab = 64;
  std::int32_t gamma = 4;
  std::int32_t width = 2;  // children per node for the tree rules
  std::int64_t tokens = 200000;
  float temperature = 1.0f;
  std::int32_t top_k = 0;
  float top_p = 1.0f;
  float draft_noise = 0.6f;  // sd of the draft's logit perturbation
  std::uint64_t seed = 1;
};

void add_demo_options(CLI::App& cmd, DemoOptions& o);
int run_demo(const DemoOptions& o);

}  // namespace specdec::cli
