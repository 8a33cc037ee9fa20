// What `generate` and `bench` share: loading a target (and draft) with their
// tokenizer, and printing a method's Stats.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "specdec/core/sampling_params.hpp"
#include "specdec/engine/stats.hpp"
#include "specdec/io/prompts.hpp"
#include "specdec/tokenizer/tokenizer.hpp"
#include "specdec/torch/inference_dtype.hpp"
#include "specdec/torch/llama_model.hpp"
#include "specdec/torch/threads.hpp"

namespace specdec::cli {

struct Session {
  tokenizer::Tokenizer tokenizer;
  std::filesystem::path tokenizer_path;
  torch_backend::LlamaModel target;
  std::optional<torch_backend::LlamaModel> draft;
};

// The tokenizer defaults to tokenizer.model / tokenizer.json in the target
// directory or its parent (models/ keeps one for both models). Checks that
// every vocabulary agrees. `dtype` is the --dtype value (auto, f32, bf16):
// the target and draft pack their weights in it (heads follow the target),
// and a request this CPU cannot grant natively is said on stderr.
Session load_session(const std::filesystem::path& target, const std::filesystem::path& draft,
                     const std::filesystem::path& tokenizer, int threads, const std::string& dtype = "f32");

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

// One line, when other work on the cores cost the forwards enough to run on
// one thread (specdec/torch/threads.hpp): the stalls, and how much ran alone.
void print_contention_note(const torch_backend::ContentionStats& c);

}  // namespace specdec::cli
