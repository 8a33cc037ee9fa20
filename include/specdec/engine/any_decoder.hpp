// A type-erased decoder, so a command line or a server can pick a method at
// run time. The templated decoders stay the primary API: this owns one of them
// (with whatever it borrows: drafter, verifier, models' wrappers), built in
// place because decoders hold pointers to their parts and do not move.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>

#include "specdec/core/error.hpp"
#include "specdec/engine/generation.hpp"

namespace specdec {

class AnyDecoder {
 public:
  AnyDecoder() = default;

  // Builds a T from args on the heap. T must provide
  //   GenerationResult generate(std::span<const TokenId>, const GenerationOptions&, const TokenCallback&).
  template <class T, class... Args>
  static AnyDecoder make(std::string name, Args&&... args) {
    AnyDecoder d;
    d.name_ = std::move(name);
    d.impl_ = std::make_unique<Holder<T>>(std::forward<Args>(args)...);
    return d;
  }

  explicit operator bool() const { return impl_ != nullptr; }
  const std::string& name() const { return name_; }

  GenerationResult generate(std::span<const TokenId> prompt, const GenerationOptions& options,
                            const TokenCallback& on_token = {}) {
    if (!impl_) throw InvalidArgumentError("AnyDecoder: empty (no method was assigned)");
    return impl_->generate(prompt, options, on_token);
  }

 private:
  struct Interface {
    virtual ~Interface() = default;
    virtual GenerationResult generate(std::span<const TokenId>, const GenerationOptions&, const TokenCallback&) = 0;
  };
  template <class T>
  struct Holder final : Interface {
    template <class... Args>
    explicit Holder(Args&&... args) : value(std::forward<Args>(args)...) {}
    GenerationResult generate(std::span<const TokenId> prompt, const GenerationOptions& options,
                              const TokenCallback& on_token) override {
      return value.generate(prompt, options, on_token);
    }
    T value;
  };

  std::string name_;
  std::unique_ptr<Interface> impl_;
};

}  // namespace specdec
