// `specdec convert`: re-save a Llama checkpoint (config.json + safetensors,
// e.g. a training checkpoint) with its weights stored as f32, f16 or bf16.
#include "convert.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/torch/llama_model.hpp"

namespace specdec::cli {

void add_convert_options(CLI::App& cmd, ConvertCommand& c) {
  cmd.add_option("--in", c.in, "model directory to read")->required()->check(CLI::ExistingDirectory);
  cmd.add_option("--out", c.out, "model directory to write")->required();
  cmd.add_option("--dtype", c.dtype, "storage dtype: f32, f16 or bf16");
}

int run_convert(const ConvertCommand& c) {
  const DType dtype = c.dtype == "f32"    ? DType::kF32
                      : c.dtype == "f16"  ? DType::kF16
                      : c.dtype == "bf16" ? DType::kBF16
                                          : throw InvalidArgumentError(fmt::format(
                                                "convert: dtype must be f32, f16 or bf16, got '{}'", c.dtype));
  const auto model = torch_backend::LlamaModel::load(c.in);
  model.save(c.out, dtype);
  std::printf("%s -> %s (%s, %lld parameters)\n", c.in.string().c_str(), c.out.string().c_str(), c.dtype.c_str(),
              static_cast<long long>(model.num_parameters()));
  return 0;
}

}  // namespace specdec::cli
