// The Llama architecture hyper-parameters from a Hugging Face `config.json`
// (transformers' LlamaConfig), read and written backend-free.
//
// Accepted: plain Llama (and Llama-shaped models such as TinyLlama) with SiLU,
// no attention / MLP biases and unscaled RoPE. Anything else that changes the
// computation throws UnsupportedError rather than loading into a model that
// would silently compute something different: rope_scaling other than null or
// {"rope_type": "default"} (linear, dynamic, yarn, llama3, ...), hidden_act
// other than "silu", attention_bias or mlp_bias true, a model that is not
// Llama (architectures must contain "LlamaForCausalLM" or model_type be
// "llama"). Malformed files (missing required field, wrong type, non-positive
// size, heads not dividing evenly) throw ModelLoadError naming the file and the
// field. Keys this struct has no field for (initializer_range, use_cache,
// pretraining_tp, ...) are ignored.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace specdec::io {

struct LlamaConfig {
  // Required in config.json.
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;  // the MLP's inner width
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  // Optional in config.json. 0 for the two head counts means "the default":
  // num_key_value_heads = num_attention_heads (multi-head attention),
  // head_dim = hidden_size / num_attention_heads; loading always fills them.
  std::int64_t num_key_value_heads = 0;
  std::int64_t head_dim = 0;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  std::optional<std::int64_t> bos_token_id;
  std::vector<std::int64_t> eos_token_ids;  // config.json holds an int or a list
  std::string torch_dtype;                  // "bfloat16", "float16", "float32", ...; empty if absent

  friend bool operator==(const LlamaConfig&, const LlamaConfig&) = default;
};

// Parses config.json text; `source` names it in error messages.
LlamaConfig parse_llama_config(std::string_view json_text, std::string_view source = "config.json");

// Reads `path`, a config.json file or a directory holding one.
LlamaConfig load_llama_config(const std::filesystem::path& path);

// The config.json text transformers writes (keys sorted, two-space indent,
// trailing newline): architectures ["LlamaForCausalLM"], model_type "llama",
// hidden_act "silu", attention_bias / mlp_bias false, rope_scaling null and
// every field above (bos / eos / torch_dtype only when set; head counts with
// defaults filled in). Throws InvalidArgumentError for an invalid config.
std::string llama_config_to_json(const LlamaConfig& cfg);

// Writes llama_config_to_json(cfg) to `path` atomically; a directory path
// gets `path`/config.json. Throws InvalidArgumentError or IoError.
void save_llama_config(const std::filesystem::path& path, const LlamaConfig& cfg);

// The architectures of specdec's default models (models/): "target" (~22M
// parameters, 87 MB in f32 — past a 32 MB L3, so decoding is memory-bound as on
// real hardware) and "draft" (~2.3M). Throws InvalidArgumentError otherwise.
LlamaConfig default_model_config(std::string_view name, std::int64_t vocab_size);

}  // namespace specdec::io
