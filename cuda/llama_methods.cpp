// cuda::method_registry() (include/specdec/cuda/llama_methods.hpp): the
// standard recipes over cuda::LlamaModel, compiled here once.
#include "specdec/cuda/llama_methods.hpp"

#include <memory>

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
    return standard_methods<LlamaModel>(std::move(hooks));
  }();
  return registry;
}

}  // namespace specdec::cuda
