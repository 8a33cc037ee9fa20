#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "specdec/core/sampling_params.hpp"

namespace specdec::cli {

struct ProfileSvCommand {
  std::filesystem::path target = "models/target";
  std::filesystem::path draft = "models/draft";
  std::filesystem::path companion = "models/companion";
  std::filesystem::path tokenizer;
  std::vector<std::filesystem::path> prompt_sets;  // held-out prompts, not the bench's
  std::int64_t num_prompts = 36;
  std::vector<std::int32_t> lengths{3, 5, 7};
  std::int64_t max_new_tokens = 48;
  std::string drafts = "top1";
  SamplingParams sampling{0.0f, 0, 1.0f, 0};
  std::int32_t s_bins = 20, a_bins = 15, x_bins = 10;
  std::int32_t batch = 16;
  std::filesystem::path out;   // default: sv/<sampling>.json beside the target
  std::filesystem::path json;  // the report (entropies per set and binning)
  int threads = 0;
  std::string dtype = "auto";  // --dtype: the inference weights' precision
};

void add_profile_sv_options(CLI::App& cmd, ProfileSvCommand& p);
int run_profile_sv(const ProfileSvCommand& p);

}  // namespace specdec::cli
