// What every command that decodes shares, whichever backend runs its models
// (libtorch on the CPU, session.hpp; CUDA, generate_cuda.cpp): finding the
// tokenizer, the sampling and precision options, printing a method's Stats,
// and writing output files.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "specdec/core/sampling_params.hpp"
#include "specdec/engine/stats.hpp"
#include "specdec/io/prompts.hpp"

namespace specdec::cli {

// `given` when not empty, else tokenizer.model / tokenizer.json in the
// target directory or its parent (models/ keeps one for both models);
// ModelLoadError when there is none.
std::filesystem::path tokenizer_path(const std::filesystem::path& target, const std::filesystem::path& given);

// A tokenizer the draft's own directory holds (not its parent's, which
// models/ shares) that differs from the one in use (`used`) is refused with
// InvalidArgumentError naming both: speculative decoding verifies the draft's
// token ids as the target's, so the two must be one vocabulary.
void check_draft_tokenizer(const std::filesystem::path& draft, const std::filesystem::path& used);

// Where this build runs models: "cpu" (libtorch) and/or "cuda" (the CUDA
// backend). The first is --device's default.
std::vector<std::string> model_devices();
// InvalidArgumentError when this build has no backend for `device`, naming
// the ones it has; `command` begins the sentence.
void check_device(const std::string& command, const std::string& device);
// --device, defaulting to the first of model_devices().
void add_device_option(CLI::App& cmd, std::string& device);

// --dtype, the precision of the inference weights; `what` ends the help text.
void add_dtype_option(CLI::App& cmd, std::string& dtype, const std::string& what = "");

// The prompt sets' reader (io/prompts.hpp).
using io::read_prompts;

// --temperature, --top-k, --top-p and --seed, the options every command that
// decodes takes.
void add_sampling_options(CLI::App& cmd, SamplingParams& sampling);

// A few lines: tokens/s, tau, per-depth acceptance, time split, overhead.
void print_stats(const std::string& label, const Stats& stats);

// Writes `text` to `path` atomically (io::write_file_atomically): a full disk
// or a killed run leaves the old file or none, never a truncated one.
// IoError naming the file.
void write_text_file(const std::filesystem::path& path, std::string_view text);
// Fails now rather than after the run when an output file cannot be written:
// creates and removes `path` + ".probe" (nothing for an empty path).
void check_writable(const std::filesystem::path& path);

}  // namespace specdec::cli
