// Hugging Face Llama config.json reading, validation and writing.
#include "specdec/io/llama_config.hpp"

#include <algorithm>
#include <span>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "specdec/core/error.hpp"
#include "specdec/io/file_io.hpp"

namespace specdec::io {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr std::string_view kArchitecture = "LlamaForCausalLM";

std::string describe(const json& v) {
  std::string text = v.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return fmt::format("{} {}", v.type_name(), text);
}

// Field access that names the file and the field in every error.
class Reader {
 public:
  Reader(const json& doc, std::string_view source) : doc_(doc), source_(source) {}

  [[noreturn]] void fail(std::string_view what) const {
    throw ModelLoadError(fmt::format("{}: {}", source_, what));
  }
  [[noreturn]] void unsupported(std::string_view what) const {
    throw UnsupportedError(fmt::format("{}: {}", source_, what));
  }
  // The value of `key`, or nullptr when absent or null.
  const json* find(const char* key) const {
    const auto it = doc_.find(key);
    return it == doc_.end() || it->is_null() ? nullptr : &*it;
  }
  const json& required(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) fail(fmt::format("missing required field '{}'", key));
    return *v;
  }
  std::int64_t integer(const char* key, const json& v) const {
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      fail(fmt::format("field '{}' is out of range: {}", key, v.dump()));
    if (!v.is_number_integer()) fail(fmt::format("field '{}' must be an integer, got {}", key, describe(v)));
    return v.get<std::int64_t>();
  }
  std::int64_t positive(const char* key, const json& v) const {
    const std::int64_t x = integer(key, v);
    if (x <= 0) fail(fmt::format("field '{}' must be positive, got {}", key, x));
    return x;
  }
  double positive_number(const char* key, const json& v) const {
    if (!v.is_number()) fail(fmt::format("field '{}' must be a number, got {}", key, describe(v)));
    const double x = v.get<double>();
    if (!(x > 0)) fail(fmt::format("field '{}' must be positive, got {}", key, x));
    return x;
  }
  bool boolean(const char* key, bool fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) fail(fmt::format("field '{}' must be true or false, got {}", key, describe(*v)));
    return v->get<bool>();
  }
  std::string string(const char* key, std::string fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) fail(fmt::format("field '{}' must be a string, got {}", key, describe(*v)));
    return v->get<std::string>();
  }

 private:
  const json& doc_;
  std::string_view source_;
};

// rope_scaling / rope_parameters: only the unscaled ("default") kind.
void check_rope(const Reader& r, const char* key, double* theta) {
  const json* v = r.find(key);
  if (v == nullptr) return;
  if (!v->is_object()) r.fail(fmt::format("field '{}' must be an object or null, got {}", key, describe(*v)));
  std::string type = "(unspecified)";
  for (const char* type_key : {"rope_type", "type"}) {
    const auto it = v->find(type_key);
    if (it != v->end() && it->is_string()) {
      type = it->get<std::string>();
      break;
    }
  }
  if (type != "default")
    r.unsupported(fmt::format("rope scaling type '{}' is not supported (field '{}' = {}); only unscaled RoPE",
                              type, key, v->dump()));
  const auto it = v->find("rope_theta");
  if (it != v->end()) *theta = r.positive_number("rope_theta", *it);
}

// Structural checks shared by loading and saving; returns the problem or "".
std::string structural_problem(const LlamaConfig& c) {
  const std::pair<const char*, std::int64_t> sizes[] = {
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"max_position_embeddings", c.max_position_embeddings}};
  // Beyond 2^24 no size is a model's (and products of such sizes overflow
  // the shapes a loader computes before it allocates).
  constexpr std::int64_t kLargest = std::int64_t{1} << 24;
  for (const auto& [key, value] : sizes) {
    if (value <= 0) return fmt::format("field '{}' must be positive, got {}", key, value);
    if (value > kLargest) return fmt::format("field '{}' is {}, beyond 2^24: not a size this library loads", key, value);
  }
  if (c.head_dim % 2 != 0) return fmt::format("head_dim {} is odd (RoPE rotates pairs of dimensions)", c.head_dim);
  if (c.bos_token_id && (*c.bos_token_id < 0 || *c.bos_token_id >= c.vocab_size))
    return fmt::format("bos_token_id {} is outside the vocabulary of {}", *c.bos_token_id, c.vocab_size);
  for (const auto eos : c.eos_token_ids)
    if (eos < 0 || eos >= c.vocab_size)
      return fmt::format("eos_token_id {} is outside the vocabulary of {}", eos, c.vocab_size);
  if (!(c.rms_norm_eps > 0))
    return fmt::format("field 'rms_norm_eps' must be positive, got {}", c.rms_norm_eps);
  if (!(c.rope_theta > 0)) return fmt::format("field 'rope_theta' must be positive, got {}", c.rope_theta);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return fmt::format("num_attention_heads {} is not divisible by num_key_value_heads {}",
                       c.num_attention_heads, c.num_key_value_heads);
  return {};
}

}  // namespace

LlamaConfig parse_llama_config(std::string_view json_text, std::string_view source) {
  // nlohmann stops at a NUL as if the input ended; JSON never contains one raw.
  if (const auto nul = json_text.find('\0'); nul != std::string_view::npos)
    throw ModelLoadError(fmt::format("{}: not valid JSON: NUL byte at offset {}", source, nul));
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::exception& e) {
    throw ModelLoadError(fmt::format("{}: not valid JSON: {}", source, e.what()));
  }
  if (!doc.is_object())
    throw ModelLoadError(fmt::format("{}: expected a JSON object, got {}", source, doc.type_name()));
  const Reader r(doc, source);

  // Is it Llama at all?
  const std::string model_type = r.string("model_type", "");
  bool listed = false;
  if (const json* arch = r.find("architectures")) {
    if (!arch->is_array())
      r.fail(fmt::format("field 'architectures' must be a list, got {}", describe(*arch)));
    listed = std::any_of(arch->begin(), arch->end(), [](const json& a) { return a == kArchitecture; });
  }
  if (!listed && model_type != "llama") {
    if (model_type.empty() && r.find("architectures") == nullptr)
      r.fail("missing required field 'model_type' (or 'architectures')");
    r.unsupported(fmt::format(
        "not a Llama model: model_type '{}', architectures {} (need model_type 'llama' or "
        "architectures containing '{}')",
        model_type, r.find("architectures") ? r.find("architectures")->dump() : "[]", kArchitecture));
  }

  LlamaConfig c;
  c.vocab_size = r.positive("vocab_size", r.required("vocab_size"));
  c.hidden_size = r.positive("hidden_size", r.required("hidden_size"));
  c.intermediate_size = r.positive("intermediate_size", r.required("intermediate_size"));
  c.num_hidden_layers = r.positive("num_hidden_layers", r.required("num_hidden_layers"));
  c.num_attention_heads = r.positive("num_attention_heads", r.required("num_attention_heads"));
  c.max_position_embeddings = r.positive("max_position_embeddings", r.required("max_position_embeddings"));
  c.rms_norm_eps = r.positive_number("rms_norm_eps", r.required("rms_norm_eps"));
  const json* kv = r.find("num_key_value_heads");
  c.num_key_value_heads = kv ? r.positive("num_key_value_heads", *kv) : c.num_attention_heads;
  if (const json* hd = r.find("head_dim")) {
    c.head_dim = r.positive("head_dim", *hd);
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      r.fail(
          fmt::format("hidden_size {} is not divisible by num_attention_heads {} (and no head_dim is given)",
                      c.hidden_size, c.num_attention_heads));
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (const json* theta = r.find("rope_theta")) c.rope_theta = r.positive_number("rope_theta", *theta);
  check_rope(r, "rope_scaling", &c.rope_theta);
  check_rope(r, "rope_parameters", &c.rope_theta);  // transformers >= 5 keeps rope_theta here
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  if (const json* bos = r.find("bos_token_id")) c.bos_token_id = r.integer("bos_token_id", *bos);
  if (const json* eos = r.find("eos_token_id")) {
    if (eos->is_array()) {
      for (const json& id : *eos) c.eos_token_ids.push_back(r.integer("eos_token_id", id));
    } else {
      c.eos_token_ids.push_back(r.integer("eos_token_id", *eos));
    }
  }
  c.torch_dtype = r.string("torch_dtype", r.string("dtype", ""));

  const std::string act = r.string("hidden_act", "silu");
  if (act != "silu") r.unsupported(fmt::format("hidden_act '{}' is not supported (only 'silu')", act));
  for (const char* bias : {"attention_bias", "mlp_bias"})
    if (r.boolean(bias, false))
      r.unsupported(fmt::format("{} = true is not supported (Llama projections have no biases)", bias));

  if (const std::string problem = structural_problem(c); !problem.empty()) r.fail(problem);
  return c;
}

LlamaConfig load_llama_config(const fs::path& path) {
  std::error_code ec;
  const fs::path file = fs::is_directory(path, ec) ? path / "config.json" : path;
  return parse_llama_config(read_text_file(file), file.string());
}

std::string llama_config_to_json(const LlamaConfig& cfg) {
  LlamaConfig c = cfg;
  if (c.num_key_value_heads == 0) c.num_key_value_heads = c.num_attention_heads;
  if (c.head_dim == 0 && c.num_attention_heads > 0) c.head_dim = c.hidden_size / c.num_attention_heads;
  if (const std::string problem = structural_problem(c); !problem.empty())
    throw InvalidArgumentError(fmt::format("llama_config_to_json: {}", problem));

  json j;  // std::map-backed: keys come out sorted, as transformers writes them
  j["architectures"] = {std::string(kArchitecture)};
  j["model_type"] = "llama";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = nullptr;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids.front();
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  if (!c.torch_dtype.empty()) j["torch_dtype"] = c.torch_dtype;
  try {
    return j.dump(2) + "\n";
  } catch (const json::exception& e) {
    throw InvalidArgumentError(fmt::format("llama_config_to_json: {}", e.what()));
  }
}

void save_llama_config(const fs::path& path, const LlamaConfig& cfg) {
  std::error_code ec;
  const fs::path file = fs::is_directory(path, ec) ? path / "config.json" : path;
  const std::string text = llama_config_to_json(cfg);
  write_text_atomically(file, text);
}

LlamaConfig default_model_config(std::string_view name, std::int64_t vocab_size) {
  if (vocab_size <= 0)
    throw InvalidArgumentError(fmt::format("default_model_config: vocab_size must be > 0, got {}", vocab_size));
  LlamaConfig c;
  c.vocab_size = vocab_size;
  c.max_position_embeddings = 1024;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = true;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  if (name == "target") {
    c.hidden_size = 512;
    c.num_hidden_layers = 6;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 4;
    c.intermediate_size = 1408;
  } else if (name == "draft") {
    c.hidden_size = 192;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.intermediate_size = 512;
  } else {
    throw InvalidArgumentError(fmt::format("unknown default model '{}' (target or draft)", name));
  }
  c.head_dim = c.hidden_size / c.num_attention_heads;
  return c;
}

}  // namespace specdec::io
