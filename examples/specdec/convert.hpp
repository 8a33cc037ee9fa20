#pragma once

#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

namespace specdec::cli {

struct ConvertCommand {
  std::filesystem::path in, out;
  std::string dtype = "f16";
};

void add_convert_options(CLI::App& cmd, ConvertCommand& c);
int run_convert(const ConvertCommand& c);

}  // namespace specdec::cli
