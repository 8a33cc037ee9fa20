// A type-erased decoder, so a command line or a server can pick a method at
// run time. The templated decoders stay the primary API: this owns one of them
// (with whatever it borrows: drafter, verifier, models' wrappers), built in
// place because decoders hold pointers to their parts and do not move.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/round.hpp"
#include "specdec/engine/continuous_batch.hpp"
#include "specdec/engine/generation.hpp"

namespace specdec {

class AnyDecoder {
 public:
  AnyDecoder() = default;

  // Builds a T from args on the heap. T must provide
  //   GenerationResult generate(std::span<const TokenId>, const GenerationOptions&, const TokenCallback&)
  // and may provide (continuous batching, engine/continuous_batch.hpp)
  //   BatchRun generate_batch(std::span<const std::vector<TokenId>>, std::span<const GenerationOptions>, std::size_t).
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

  // Request i generates from prompts[i] with options[i]; up to max_batch run
  // at once, each step one target forward for all of them.
  BatchRun generate_batch(std::span<const std::vector<TokenId>> prompts, std::span<const GenerationOptions> options,
                          std::size_t max_batch) {
    if (!impl_) throw InvalidArgumentError("AnyDecoder: empty (no method was assigned)");
    if (prompts.size() != options.size())
      throw InvalidArgumentError(fmt::format("AnyDecoder::generate_batch: {} prompts but {} options", prompts.size(),
                                             options.size()));
    return impl_->generate_batch(prompts, options, max_batch);
  }

  // Calls `observer` after every round the decoder verifies, with the round's
  // tree and rows (RoundView), for profiling and research tools; an empty
  // function detaches it. UnsupportedError for a decoder that does not expose
  // its rounds.
  void set_round_view_observer(std::function<void(const RoundView&)> observer) {
    if (!impl_) throw InvalidArgumentError("AnyDecoder: empty (no method was assigned)");
    impl_->set_round_view_observer(std::move(observer));
  }

 private:
  struct Interface {
    virtual ~Interface() = default;
    virtual GenerationResult generate(std::span<const TokenId>, const GenerationOptions&, const TokenCallback&) = 0;
    virtual BatchRun generate_batch(std::span<const std::vector<TokenId>>, std::span<const GenerationOptions>,
                                    std::size_t) = 0;
    virtual void set_round_view_observer(std::function<void(const RoundView&)>) = 0;
  };
  template <class T>
  struct Holder final : Interface {
    template <class... Args>
    explicit Holder(Args&&... args) : value(std::forward<Args>(args)...) {}
    GenerationResult generate(std::span<const TokenId> prompt, const GenerationOptions& options,
                              const TokenCallback& on_token) override {
      return value.generate(prompt, options, on_token);
    }
    BatchRun generate_batch(std::span<const std::vector<TokenId>> prompts, std::span<const GenerationOptions> options,
                            std::size_t max_batch) override {
      if constexpr (requires { value.generate_batch(prompts, options, max_batch); })
        return value.generate_batch(prompts, options, max_batch);
      else
        throw UnsupportedError("AnyDecoder: this decoder runs one request at a time (no generate_batch)");
    }
    void set_round_view_observer(std::function<void(const RoundView&)> observer) override {
      if constexpr (requires { value.set_round_view_observer(std::move(observer)); })
        value.set_round_view_observer(std::move(observer));
      else
        throw UnsupportedError("AnyDecoder: this decoder does not expose its rounds (no set_round_view_observer)");
    }
    T value;
  };

  std::string name_;
  std::unique_ptr<Interface> impl_;
};

}  // namespace specdec
