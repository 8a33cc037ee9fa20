// The host engine's methods: specdec's registry over the engine's own Model,
// HostLlama (every standard method by name, as `specdec methods` lists them
// for the libtorch model), and Lyanna with the engine's own head.
#pragma once

#include <filesystem>
#include <memory>
#include <utility>

#include "host_llama.hpp"
#include "host_lyanna_head.hpp"
#include "specdec/methods/lyanna.hpp"
#include "specdec/methods/standard_methods.hpp"
#include "specdec/tokenizer/text_vocabulary.hpp"

namespace host_engine {

inline specdec::MethodRegistry<HostLlama> method_registry() {
  specdec::MethodHooks<HostLlama> hooks;
  // SV's companion, slem's and tli's draft
  hooks.load_model = [](const std::filesystem::path& dir) { return std::make_unique<HostLlama>(dir); };
  hooks.load_vocabulary = [](const std::filesystem::path& path) {  // slem's and tli's tokenizers
    return specdec::tokenizer::text_vocabulary(specdec::Tokenizer::load(path), path.string());
  };
  auto registry = specdec::standard_methods<HostLlama>(std::move(hooks));
  registry.add(specdec::methods::lyanna_method<HostLlama, HostLyannaHead>(
      [](const specdec::MethodContext<HostLlama>& c) {
        const auto& given = c.config.text("head");
        return HostLyannaHead(given.empty() ? c.dir / "lyanna" : std::filesystem::path(given), c.target);
      }));
  return registry;
}

}  // namespace host_engine
