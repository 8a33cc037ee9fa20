#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "specdec/core/sampling_params.hpp"
#include "specdec/core/tensor_view.hpp"  // DType
#include "specdec/engine/any_decoder.hpp"
#include "specdec/methods/method_registry.hpp"
#include "specdec/tokenizer/tokenizer.hpp"

namespace specdec::cli {

struct GenerateCommand {
  std::filesystem::path target = "models/target";
  std::filesystem::path draft = "models/draft";  // loaded for the draft-model methods
  std::filesystem::path tokenizer;  // default: in the target directory or its parent
  std::string method = "chain";     // `specdec methods` lists them
  std::string prompt;
  std::int64_t max_new_tokens = 64;
  SamplingParams sampling{0.0f, 0, 1.0f, 0};  // greedy unless asked
  bool baseline = true;  // also run autoregressive decoding for the speedup
  int threads = 0;
  std::string dtype = "auto";  // --dtype: the inference weights' precision
  std::string device;          // --device: cpu (libtorch) or cuda; default: cpu where libtorch is built in
};

void add_generate_options(CLI::App& cmd, GenerateCommand& g);
// `specdec methods`: every registered method with its parameters, and the
// devices it runs on.
void add_methods_options(CLI::App& cmd);
std::string methods_listing();
int run_generate(const GenerateCommand& g);
// InvalidArgumentError when the method of `spec` has no recipe on `device`
// but has one on another, naming those (a name no device knows is left to
// the registry's parse, which lists the names).
void check_method_device(const std::string& spec, const std::string& device);

// --- what each backend gives `generate` (generate_torch.cpp: the libtorch
// models on the CPU; generate_cuda.cpp: the CUDA models) ----------------------

// A registered method, as `specdec methods` lists it.
struct ListedMethod {
  std::string name, summary, papers, needs;
  std::vector<MethodParam> params;
};
template <class M>
std::vector<ListedMethod> list_methods(const MethodRegistry<M>& registry) {
  std::vector<ListedMethod> out;
  for (const auto& m : registry.methods())
    out.push_back({m.name, m.summary, m.papers, describe(m.models), m.params});
  return out;
}
std::vector<ListedMethod> torch_methods();
int generate_on_torch(const GenerateCommand& g);
std::vector<ListedMethod> cuda_methods();
int generate_on_cuda(const GenerateCommand& g);
// DeviceError saying so when no CUDA device is visible to this process.
void require_cuda_device();
// The CUDA model's weights for a --dtype value: auto and bf16 are bf16, f32
// is f32; InvalidArgumentError for another.
DType cuda_weights_dtype(const std::string& dtype);

// What a backend hands the streamed run: the method and its autoregressive
// baseline (null with --no-baseline or when the method is autoregressive
// decoding), both built; the lines that say what was loaded (printed first:
// method, models, head); and, optionally, what it reports around each timed
// run (the libtorch backend: a note when other work took the cores).
struct GenerationRun {
  AnyDecoder& method;
  AnyDecoder* baseline;
  const tokenizer::Tokenizer& tokenizer;
  std::filesystem::path tokenizer_path;
  std::vector<std::string> loaded;
  std::function<void()> before_timed, after_timed;
};
// Prints what was loaded, streams the method's text as it is accepted (Ctrl-C
// stops it after the round in flight and reports what it made), its Stats,
// then the baseline's and the speedup measured in the same run. The exit
// status.
int stream_generation(GenerationRun& run, const GenerateCommand& g);

}  // namespace specdec::cli
