#pragma once

#include <CLI/CLI.hpp>

#include "specdec/torch/trainer.hpp"

namespace specdec::cli {

struct TrainCommand {
  torch_backend::TrainOptions options;
  std::string preset = "target";
  std::string config_path;  // a config.json instead of a preset
  std::int64_t vocab = 8000;
};

void add_train_options(CLI::App& cmd, TrainCommand& t);
void add_distill_options(CLI::App& cmd, TrainCommand& t);
int run_train(TrainCommand& t);

}  // namespace specdec::cli
