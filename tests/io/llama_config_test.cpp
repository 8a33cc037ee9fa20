// LlamaConfig from Hugging Face config.json: a real config, defaults, the
// config we write, and each error, with the file and field in the message.
#include "specdec/io/llama_config.hpp"

#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/io_test_util.hpp"
#include "specdec/core/error.hpp"
#include "support/catch.hpp"

using specdec::ModelLoadError;
using specdec::UnsupportedError;
using specdec::io::LlamaConfig;
using specdec::io::load_llama_config;
using specdec::io::save_llama_config;
using namespace specdec::io::testing;

namespace {

// TinyLlama-1.1B-Chat-v1.0's config.json, as published.
constexpr const char* kTinyLlama = R"({
  "architectures": [
    "LlamaForCausalLM"
  ],
  "attention_bias": false,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 5632,
  "max_position_embeddings": 2048,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 22,
  "num_key_value_heads": 4,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.35.0",
  "use_cache": true,
  "vocab_size": 32000
}
)";

nlohmann::json tiny() {
  return nlohmann::json::parse(kTinyLlama);
}

// Writes `j` as <dir>/config.json and expects loading to throw E with the
// file name and `needles` in the message.
template <class E>
void expect_bad(const nlohmann::json& j, std::initializer_list<std::string_view> needles) {
  TempDir dir;
  write_file(dir / "config.json", j.dump(2));
  INFO("config: " << j.dump());
  check_throws<E>([&] { (void)load_llama_config(dir / "config.json"); }, {"config.json"});
  check_throws<E>([&] { (void)load_llama_config(dir / "config.json"); }, needles);
}

}  // namespace

TEST_CASE("TinyLlama's config.json loads with every field", "[unit][io]") {
  TempDir dir;
  write_file(dir / "config.json", kTinyLlama);
  const LlamaConfig c = load_llama_config(dir.path());  // a directory finds its config.json
  CHECK(c.vocab_size == 32000);
  CHECK(c.hidden_size == 2048);
  CHECK(c.intermediate_size == 5632);
  CHECK(c.num_hidden_layers == 22);
  CHECK(c.num_attention_heads == 32);
  CHECK(c.num_key_value_heads == 4);
  CHECK(c.head_dim == 64);
  CHECK(c.max_position_embeddings == 2048);
  CHECK(c.rms_norm_eps == 1e-5);
  CHECK(c.rope_theta == 10000.0);
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK(c.bos_token_id == 1);
  CHECK(c.eos_token_ids == std::vector<std::int64_t>{2});
  CHECK(c.torch_dtype == "bfloat16");
  CHECK(load_llama_config(dir / "config.json") == c);
}

TEST_CASE("Optional config fields take transformers' defaults", "[unit][io]") {
  const LlamaConfig c = specdec::io::parse_llama_config(R"({
    "model_type": "llama", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6, "num_key_value_heads": null, "bos_token_id": null})");
  CHECK(c.num_key_value_heads == 4);
  CHECK(c.head_dim == 16);
  CHECK(c.rope_theta == 10000.0);
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK_FALSE(c.bos_token_id.has_value());
  CHECK(c.eos_token_ids.empty());
  CHECK(c.torch_dtype.empty());
}

TEST_CASE("Llama-3-style fields load: eos list, explicit head_dim, newer dtype and rope_parameters keys",
          "[unit][io]") {
  auto j = tiny();
  j["vocab_size"] = 128256;
  j["eos_token_id"] = {128001, 128008, 128009};
  j["head_dim"] = 128;  // need not equal hidden_size / heads
  j["hidden_size"] = 3000;
  j["num_attention_heads"] = 32;
  j.erase("torch_dtype");
  j["dtype"] = "float16";
  j["architectures"] = {"LlamaForCausalLM"};
  j.erase("model_type");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  j["rope_scaling"] = {{"rope_type", "default"}};
  const LlamaConfig c = specdec::io::parse_llama_config(j.dump());
  CHECK(c.eos_token_ids == std::vector<std::int64_t>{128001, 128008, 128009});
  CHECK(c.head_dim == 128);
  CHECK(c.torch_dtype == "float16");
  CHECK(c.rope_theta == 500000.0);
}

TEST_CASE("A saved config reads back equal and carries what transformers expects", "[unit][io]") {
  TempDir dir;
  LlamaConfig c;
  c.vocab_size = 32000;
  c.hidden_size = 256;
  c.intermediate_size = 688;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 1024;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.tie_word_embeddings = true;
  c.bos_token_id = 1;
  c.eos_token_ids = {2, 7};
  c.torch_dtype = "float16";
  save_llama_config(dir.path(), c);  // a directory gets config.json
  const LlamaConfig back = load_llama_config(dir / "config.json");
  LlamaConfig expected = c;
  expected.head_dim = 32;  // the default, filled in
  CHECK(back == expected);

  const auto j = nlohmann::json::parse(read_file(dir / "config.json"));
  CHECK(j["architectures"] == nlohmann::json::array({"LlamaForCausalLM"}));
  CHECK(j["model_type"] == "llama");
  CHECK(j["hidden_act"] == "silu");
  CHECK(j["attention_bias"] == false);
  CHECK(j["mlp_bias"] == false);
  CHECK(j["rope_scaling"].is_null());
  CHECK(j["eos_token_id"] == nlohmann::json::array({2, 7}));
  CHECK(j["rms_norm_eps"] == 1e-5);
  CHECK(j["num_key_value_heads"] == 2);
  CHECK_FALSE(std::filesystem::exists(dir / "config.json.tmp"));

  c.eos_token_ids = {2};
  c.bos_token_id.reset();
  c.torch_dtype.clear();
  const auto k = nlohmann::json::parse(specdec::io::llama_config_to_json(c));
  CHECK(k["eos_token_id"] == 2);
  CHECK_FALSE(k.contains("bos_token_id"));
  CHECK_FALSE(k.contains("torch_dtype"));

  c.num_key_value_heads = 3;
  check_throws<specdec::InvalidArgumentError>(
      [&] { save_llama_config(dir.path(), c); },
      {"num_attention_heads 8 is not divisible by num_key_value_heads 3"});
}

TEST_CASE("Each missing required config field is named", "[unit][io]") {
  for (const char* field : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "max_position_embeddings", "rms_norm_eps"}) {
    auto j = tiny();
    j.erase(field);
    expect_bad<ModelLoadError>(j, {fmt::format("missing required field '{}'", field)});
    j[field] = nullptr;
    expect_bad<ModelLoadError>(j, {fmt::format("missing required field '{}'", field)});
  }
}

TEST_CASE("Config fields of the wrong type are named with what was found", "[unit][io]") {
  auto j = tiny();
  j["hidden_size"] = "2048";
  expect_bad<ModelLoadError>(j, {"field 'hidden_size' must be an integer, got string \"2048\""});
  j = tiny();
  j["num_hidden_layers"] = 22.5;
  expect_bad<ModelLoadError>(j, {"field 'num_hidden_layers' must be an integer, got number 22.5"});
  j = tiny();
  j["rms_norm_eps"] = "1e-5";
  expect_bad<ModelLoadError>(j, {"field 'rms_norm_eps' must be a number"});
  j = tiny();
  j["tie_word_embeddings"] = "false";
  expect_bad<ModelLoadError>(j, {"field 'tie_word_embeddings' must be true or false"});
  j = tiny();
  j["eos_token_id"] = {2, "</s>"};
  expect_bad<ModelLoadError>(j, {"field 'eos_token_id' must be an integer"});
  j = tiny();
  j["architectures"] = "LlamaForCausalLM";
  expect_bad<ModelLoadError>(j, {"field 'architectures' must be a list"});
  j = tiny();
  j["rope_scaling"] = "linear";
  expect_bad<ModelLoadError>(j, {"field 'rope_scaling' must be an object or null"});
  j = tiny();
  j["vocab_size"] = 18446744073709551615ull;
  expect_bad<ModelLoadError>(j, {"field 'vocab_size' is out of range"});
}

TEST_CASE("Non-positive sizes are rejected naming the field and value", "[unit][io]") {
  for (const char* field :
       {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "max_position_embeddings", "head_dim"}) {
    auto j = tiny();
    j[field] = 0;
    expect_bad<ModelLoadError>(j, {fmt::format("field '{}' must be positive, got 0", field)});
    j[field] = -3;
    expect_bad<ModelLoadError>(j, {fmt::format("field '{}' must be positive, got -3", field)});
  }
  auto j = tiny();
  j["rms_norm_eps"] = 0.0;
  expect_bad<ModelLoadError>(j, {"field 'rms_norm_eps' must be positive"});
  j = tiny();
  j["rope_theta"] = -1.0;
  expect_bad<ModelLoadError>(j, {"field 'rope_theta' must be positive"});
}

TEST_CASE("Heads that do not divide evenly are rejected", "[unit][io]") {
  auto j = tiny();
  j["hidden_size"] = 2050;
  expect_bad<ModelLoadError>(j, {"hidden_size 2050 is not divisible by num_attention_heads 32"});
  j = tiny();
  j["num_key_value_heads"] = 5;
  expect_bad<ModelLoadError>(j, {"num_attention_heads 32 is not divisible by num_key_value_heads 5"});
}

TEST_CASE("An odd head_dim, special tokens outside the vocabulary and implausible sizes are rejected",
          "[unit][io]") {
  auto j = tiny();
  j["head_dim"] = 63;
  expect_bad<ModelLoadError>(j, {"head_dim 63 is odd"});
  j = tiny();
  j["bos_token_id"] = 32000;
  expect_bad<ModelLoadError>(j, {"bos_token_id 32000 is outside the vocabulary of 32000"});
  j = tiny();
  j["eos_token_id"] = nlohmann::json::array({2, -1});
  expect_bad<ModelLoadError>(j, {"eos_token_id -1 is outside the vocabulary"});
  j = tiny();
  j["max_position_embeddings"] = std::int64_t{1} << 40;
  expect_bad<ModelLoadError>(j, {"field 'max_position_embeddings' is 1099511627776, beyond 2^24"});
}

TEST_CASE("Rope scaling, biases, other activations and other models are unsupported", "[unit][io]") {
  for (const char* type : {"linear", "dynamic", "llama3", "yarn"}) {
    auto j = tiny();
    j["rope_scaling"] = {{"type", type}, {"factor", 8.0}};
    expect_bad<UnsupportedError>(j, {fmt::format("rope scaling type '{}' is not supported", type)});
    j["rope_scaling"] = {{"rope_type", type}, {"factor", 8.0}};
    expect_bad<UnsupportedError>(j, {fmt::format("rope scaling type '{}' is not supported", type)});
  }
  auto j = tiny();
  j["rope_scaling"] = {{"factor", 2.0}};
  expect_bad<UnsupportedError>(j, {"rope scaling type '(unspecified)' is not supported"});
  j = tiny();
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}};
  expect_bad<UnsupportedError>(j, {"rope scaling type 'llama3'", "rope_parameters"});
  j = tiny();
  j["attention_bias"] = true;
  expect_bad<UnsupportedError>(j, {"attention_bias = true is not supported"});
  j = tiny();
  j["mlp_bias"] = true;
  expect_bad<UnsupportedError>(j, {"mlp_bias = true is not supported"});
  j = tiny();
  j["hidden_act"] = "gelu";
  expect_bad<UnsupportedError>(j, {"hidden_act 'gelu' is not supported"});
  j = tiny();
  j["model_type"] = "mistral";
  j["architectures"] = {"MistralForCausalLM"};
  expect_bad<UnsupportedError>(j, {"not a Llama model", "model_type 'mistral'", "MistralForCausalLM"});
  j = tiny();
  j.erase("model_type");
  j.erase("architectures");
  expect_bad<ModelLoadError>(j, {"missing required field 'model_type'"});
}

TEST_CASE("An unreadable or malformed config.json names the file", "[unit][io]") {
  TempDir dir;
  check_throws<ModelLoadError>([&] { (void)load_llama_config(dir / "config.json"); },
                               {"config.json", "cannot open", "No such file"});
  write_file(dir / "config.json", R"({"model_type": "llama",)");
  check_throws<ModelLoadError>([&] { (void)load_llama_config(dir / "config.json"); },
                               {"config.json", "not valid JSON"});
  write_file(dir / "config.json", std::string(kTinyLlama) + std::string("\0{", 2));
  check_throws<ModelLoadError>([&] { (void)load_llama_config(dir / "config.json"); },
                               {"config.json", "not valid JSON: NUL byte"});
  write_file(dir / "config.json", "[1, 2]");
  check_throws<ModelLoadError>([&] { (void)load_llama_config(dir / "config.json"); },
                               {"config.json", "expected a JSON object, got array"});
}

TEST_CASE("The default model configs are valid Llama configs that round-trip through JSON", "[unit][io]") {
  for (const char* name : {"target", "draft"}) {
    const auto c = specdec::io::default_model_config(name, 8000);
    CHECK(c.hidden_size % c.num_attention_heads == 0);
    CHECK(c.num_attention_heads % c.num_key_value_heads == 0);
    CHECK(specdec::io::parse_llama_config(specdec::io::llama_config_to_json(c)) == c);
  }
  REQUIRE_THROWS_AS(specdec::io::default_model_config("huge", 8000), specdec::InvalidArgumentError);
  REQUIRE_THROWS_AS(specdec::io::default_model_config("target", 0), specdec::InvalidArgumentError);
}
