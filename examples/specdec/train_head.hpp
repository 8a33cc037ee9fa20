#pragma once

#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "specdec/torch/draft_head_trainer.hpp"
#include "specdec/torch/feature_cache.hpp"

namespace specdec::cli {

// Shared by the trainers' commands (train-lyanna, cache-features, train-spire).
at::ScalarType training_matmul_dtype(const std::string& requested);  // --matmul-dtype auto | f32 | bf16
void add_matmul_dtype_option(CLI::App& cmd, std::string& dtype);
void keep_freed_memory();  // keep freed training activations in the heap
void print_line(const std::string& line);

struct TrainHeadCommand {
  torch_backend::HeadTrainOptions options;
  std::string variant = "lyanna";  // lyanna | no-token-info | no-first-token | eagle | eagle3
  std::string matmul_dtype = "auto";
  CLI::Option* alpha_option = nullptr;  // eagle3's default alpha is 0 unless --alpha is given
};

void add_train_head_options(CLI::App& cmd, TrainHeadCommand& t);
int run_train_head(TrainHeadCommand& t);

struct CacheFeaturesCommand {
  torch_backend::FeatureCacheOptions options;
  std::string matmul_dtype = "auto";
};

void add_cache_features_options(CLI::App& cmd, CacheFeaturesCommand& c);
int run_cache_features(CacheFeaturesCommand& c);

struct HotTokensCommand {
  std::string tokens, out;
  std::int64_t vocab = 8000;
  std::int64_t top = 2048;
};

void add_hot_tokens_options(CLI::App& cmd, HotTokensCommand& h);
int run_hot_tokens(const HotTokensCommand& h);

struct EvalHeadCommand {
  std::filesystem::path head, target = "models/target", heldout;
  std::int64_t windows = 64, seq_len = 256, draft_steps = 3;
  int threads = 0;
};

void add_eval_head_options(CLI::App& cmd, EvalHeadCommand& e);
int run_eval_head(const EvalHeadCommand& e);

}  // namespace specdec::cli
