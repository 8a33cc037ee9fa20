// cuda::method_registry() (include/specdec/cuda/llama_methods.hpp): the
// standard recipes over cuda::LlamaModel, compiled here once.
#include "specdec/cuda/llama_methods.hpp"

#include <memory>

#include "specdec/cpu/llama_model.hpp"
#include "specdec/cpu/row_linear.hpp"
#include "specdec/cpu/threads.hpp"
#include "specdec/methods/duo.hpp"
#include "specdec/methods/standard_methods.hpp"
#include "specdec/tokenizer/text_vocabulary.hpp"

namespace specdec::cuda {

const MethodRegistry<LlamaModel>& method_registry() {
  static const MethodRegistry<LlamaModel> registry = [] {
    MethodHooks<LlamaModel> hooks;
    hooks.load_model = [](const std::filesystem::path& dir) {
      return std::make_unique<LlamaModel>(LlamaModel::load(dir));
    };
    hooks.load_vocabulary = [](const std::filesystem::path& path) {  // slem's and tli's tokenizers
      return tokenizer::text_vocabulary(Tokenizer::load(path), path.string());
    };
    // duo:host_draft=DIR: the paper's split (arXiv 2503.00784 §3.1), the
    // target on the GPU and the draft on host cores (cpu::LlamaModel, in the
    // target's precision where the CPU runs it), on the threads duo starts.
    hooks.thread_setup = [](int threads) { cpu::set_forward_threads(threads); };
    hooks.host_draft_duo = [](const MethodContext<LlamaModel>& c, const std::filesystem::path& dir) {
      auto draft = std::make_shared<cpu::LlamaModel>(
          cpu::LlamaModel::load(dir, cpu::RowLinear::runnable(c.target.weight_dtype())));
      return methods::duo_decoder(c, *draft, draft);
    };
    return standard_methods<LlamaModel>(std::move(hooks));
  }();
  return registry;
}

}  // namespace specdec::cuda
