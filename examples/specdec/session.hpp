// What the libtorch commands share: loading a target (and draft) with their
// tokenizer on the CPU. What every backend shares is in common.hpp.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "common.hpp"
#include "specdec/cpu/threads.hpp"
#include "specdec/tokenizer/tokenizer.hpp"
#include "specdec/torch/inference_dtype.hpp"
#include "specdec/torch/llama_model.hpp"

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

// One line, when other work on the cores cost the forwards enough to run on
// one thread (specdec/cpu/threads.hpp): the stalls, and how much ran alone.
void print_contention_note(const cpu::ContentionStats& c);

}  // namespace specdec::cli
