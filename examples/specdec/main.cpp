// specdec — command-line front end.
//
//   specdec demo [options]   the acceptance rules on synthetic distributions
//   specdec train [options]  train a Llama-architecture model (libtorch builds)
//
// Later subcommands (generate, bench, train) join here as the backends land.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "demo.hpp"
#if SPECDEC_CLI_WITH_TORCH
#include "train.hpp"
#endif
#include "specdec/core/error.hpp"
#include "specdec/core/version.hpp"

int main(int argc, char** argv) {
  CLI::App app{"specdec: speculative decoding algorithms for LLM inference"};
  app.set_version_flag("--version", specdec::kVersion);
  app.require_subcommand(1);

  specdec::cli::DemoOptions demo;
  auto* demo_cmd = app.add_subcommand(
      "demo", "Run every acceptance rule on a synthetic target/draft pair and compare them");
  specdec::cli::add_demo_options(*demo_cmd, demo);

#if SPECDEC_CLI_WITH_TORCH
  specdec::cli::TrainCommand train;
  auto* train_cmd = app.add_subcommand("train", "Train a Llama-architecture language model on a token file");
  specdec::cli::add_train_options(*train_cmd, train);
#endif

  CLI11_PARSE(app, argc, argv);
  try {
    if (demo_cmd->parsed()) return specdec::cli::run_demo(demo);
#if SPECDEC_CLI_WITH_TORCH
    if (train_cmd->parsed()) return specdec::cli::run_train(train);
#endif
  } catch (const specdec::Error& e) {
    std::fprintf(stderr, "specdec: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
