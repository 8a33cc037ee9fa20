#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "specdec/torch/spire_trainer.hpp"

namespace specdec::cli {

struct TrainSpireCommand {
  torch_backend::SpireTrainOptions options;
  std::string matmul_dtype = "auto";
  std::string memory = "target";  // target | embedding
  bool dense = false, no_feedback = false, random_init = false, hard_loss = false;
};

void add_train_spire_options(CLI::App& cmd, TrainSpireCommand& t);
int run_train_spire(TrainSpireCommand& t);

}  // namespace specdec::cli
