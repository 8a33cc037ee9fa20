// specdec — command-line front end.
//
//   specdec demo [options]   the acceptance rules on synthetic distributions
//
// Later subcommands (generate, bench, train) join here as the backends land.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "demo.hpp"
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

  CLI11_PARSE(app, argc, argv);
  try {
    if (demo_cmd->parsed()) return specdec::cli::run_demo(demo);
  } catch (const specdec::Error& e) {
    std::fprintf(stderr, "specdec: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
