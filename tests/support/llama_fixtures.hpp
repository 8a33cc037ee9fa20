// Shared pieces of the libtorch tests (tests/torch/): tiny Llama configs, a
// learnable token stream on disk, a fresh scratch directory, a head-training
// setup.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include "specdec/io/llama_config.hpp"
#include "specdec/torch/draft_head_trainer.hpp"

namespace specdec::testing {

// Two layers, 2 / 1 heads, MLP 2 x hidden, tied embeddings, 64 positions.
inline io::LlamaConfig tiny_training_config(std::int64_t hidden, std::int64_t vocab = 50) {
  io::LlamaConfig c;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = 2 * hidden;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = hidden / 2;
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = true;
  return c;
}

// The decoding tests' models: vocabulary 61, 4 / 2 heads, MLP 2 x hidden,
// 256 positions, untied.
inline io::LlamaConfig tiny_decoding_config(std::int64_t layers, std::int64_t hidden) {
  io::LlamaConfig c;
  c.vocab_size = 61;
  c.hidden_size = hidden;
  c.intermediate_size = 2 * hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = hidden / 4;
  c.max_position_embeddings = 256;
  return c;
}

// A periodic stream (period 7: tokens 10..16) with a little noise every 97th
// token: easy to learn, not trivial. Flat uint16, as the trainers read it.
inline std::filesystem::path write_period_tokens(const std::filesystem::path& path, std::size_t n,
                                                 std::uint16_t vocab = 50) {
  std::vector<std::uint16_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::uint16_t>(i % 97 == 0 ? (i * 31) % vocab : 10 + i % 7);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(t.data()),
                                              static_cast<std::streamsize>(t.size() * 2));
  return path;
}

// <tmp>/<name>, emptied.
inline std::filesystem::path fresh_dir(const char* name) {
  const auto d = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// A head-training setup in `dir`: a random target (hidden 16, seed 3) in
// target/, 5000 training and 1000 held-out tokens of the periodic stream, and
// options that learn it in 60 steps (rank-4 token info over 12 hot tokens;
// one thread, so runs are bitwise reproducible). out_dir is left to the test.
inline torch_backend::HeadTrainOptions tiny_head_train_options(const std::filesystem::path& dir) {
  torch_backend::LlamaModel::random(tiny_training_config(16), 3).save(dir / "target", DType::kF32);
  torch_backend::HeadTrainOptions o;
  o.train_tokens = write_period_tokens(dir / "train.u16", 5000);
  o.heldout_tokens = write_period_tokens(dir / "heldout.u16", 1000);
  o.target_dir = dir / "target";
  o.token_info_rank = 4;
  o.hot_tokens = 12;
  o.steps = 60;
  o.batch_size = 4;
  o.seq_len = 24;
  o.lr = 1e-2;
  o.warmup_steps = 5;
  o.checkpoint_every = 1000;
  o.eval_windows = 8;
  o.save_dtype = "f32";
  o.threads = 1;
  return o;
}

}  // namespace specdec::testing
