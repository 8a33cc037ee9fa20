// A type-erased decoder, so a command line or a host's scheduler can pick a
// method at run time by name (methods/method_registry.hpp) and still drive it
// the way the templated engine is driven: requests begin, each step()
// advances the open requests by one round (ONE target forward for all of
// them), and a request's result is taken once it is done. generate() and
// generate_batch() run that same engine for one request or a continuous
// batch.
//
// One generic holder serves every method. A method hands make<Parts>() its
// parts, built in place (the engine points at its verifier and models' wrappers,
// so they do not move):
//   typename Parts::Engine                a SpeculativeEngine
//   Engine& engine()
//   std::unique_ptr<Slot> slot(std::int32_t seq, const GenerationOptions&, TokenCallback)
//                                         a new request's own drafter and policy and the
//                                         engine's Request over them (member `request`)
// and may add
//   void run(F&& f)                       runs f, every call into the engine, where the
//                                         method runs (DuoDecoding: on the target's own
//                                         thread) or with a setting installed around it
//   void finish(Slot&, GenerationResult&) what a finished request adds to its result
//                                         (a feature head's timers)
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
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
  // A request's id is its sequence id in the method's models: the host's to
  // choose, unused by any other open request or sequence of those models.
  using RequestId = std::int32_t;

  AnyDecoder() = default;

  template <class Parts, class... Args>
  static AnyDecoder make(std::string name, Args&&... args) {
    AnyDecoder d;
    d.name_ = std::move(name);
    d.impl_ = std::make_unique<Holder<Parts>>(std::forward<Args>(args)...);
    return d;
  }

  explicit operator bool() const { return impl_ != nullptr; }
  // The method's canonical spec ("chain:k=4").
  const std::string& name() const { return name_; }

  // ---- one step at a time -----------------------------------------------------

  // Opens request `id`: prefills its prompt in the target and its drafter.
  // It takes part in every step() from now on; a request with nothing to
  // generate is done at once.
  void begin(RequestId id, std::span<const TokenId> prompt, const GenerationOptions& options,
             TokenCallback on_token = {}) {
    impl().begin(id, prompt, options, std::move(on_token));
  }
  // One round for every open request that is not done: each drafts, ONE
  // target forward scores them all, each accepts and commits. A request that
  // finishes is closed in the models and done() turns true.
  void step() { impl().step(); }
  // The same for the requests `ids` only (open, not done).
  void step(std::span<const RequestId> ids) { impl().step(ids); }
  // Ends an open request early (the host cancelled it); what it generated
  // stays in its result.
  void abort(RequestId id) { impl().abort(id); }
  bool done(RequestId id) const { return impl().done(id); }
  // Its tokens so far, stop reason and Stats (final once done).
  const GenerationResult& result(RequestId id) const { return impl().result(id); }
  // The result of a done (or aborted) request; its id is free again.
  GenerationResult take_result(RequestId id) { return impl().take_result(id); }
  // The open requests (begun, result not taken), in id order.
  std::vector<RequestId> requests() const { return impl().requests(); }

  // ---- whole generations ------------------------------------------------------

  // One request, stepped until done (under an id no open request has).
  GenerationResult generate(std::span<const TokenId> prompt, const GenerationOptions& options,
                            const TokenCallback& on_token = {}) {
    return impl().generate(prompt, options, on_token);
  }

  // Request i generates from prompts[i] with options[i] as sequence i; up to
  // max_batch run at once, each step one target forward for all of them
  // (engine/continuous_batch.hpp). No request may be open. `fence` runs
  // after each admission's prefills (run_continuous_batch).
  BatchRun generate_batch(std::span<const std::vector<TokenId>> prompts,
                          std::span<const GenerationOptions> options, std::size_t max_batch,
                          const std::function<void()>& fence = {}) {
    if (prompts.size() != options.size())
      throw InvalidArgumentError(fmt::format("AnyDecoder::generate_batch: {} prompts but {} options", prompts.size(),
                                             options.size()));
    return impl().generate_batch(prompts, options, max_batch, fence);
  }

  // Calls `observer` after every round the decoder verifies, with the round's
  // tree and rows (RoundView), for profiling and research tools; an empty
  // function detaches it.
  void set_round_view_observer(std::function<void(const RoundView&)> observer) {
    impl().set_round_view_observer(std::move(observer));
  }

 private:
  struct Interface {
    virtual ~Interface() = default;
    virtual void begin(RequestId, std::span<const TokenId>, const GenerationOptions&, TokenCallback) = 0;
    virtual void step() = 0;
    virtual void step(std::span<const RequestId>) = 0;
    virtual void abort(RequestId) = 0;
    virtual bool done(RequestId) const = 0;
    virtual const GenerationResult& result(RequestId) const = 0;
    virtual GenerationResult take_result(RequestId) = 0;
    virtual std::vector<RequestId> requests() const = 0;
    virtual GenerationResult generate(std::span<const TokenId>, const GenerationOptions&, const TokenCallback&) = 0;
    virtual BatchRun generate_batch(std::span<const std::vector<TokenId>>, std::span<const GenerationOptions>,
                                    std::size_t, const std::function<void()>&) = 0;
    virtual void set_round_view_observer(std::function<void(const RoundView&)>) = 0;
  };

  template <class Parts>
  struct Holder final : Interface {
    using Engine = typename Parts::Engine;
    using Request = typename Engine::Request;
    using SlotPtr = decltype(std::declval<Parts&>().slot(RequestId{}, std::declval<const GenerationOptions&>(),
                                                          TokenCallback{}));

    template <class... Args>
    explicit Holder(Args&&... args) : parts(std::forward<Args>(args)...) {}

    template <class F>
    void run(F&& f) {
      if constexpr (requires { parts.run(f); })
        parts.run(f);
      else
        f();
    }
    SlotPtr& slot_of(RequestId id) {
      const auto it = open.find(id);
      if (it == open.end()) throw InvalidArgumentError(fmt::format("AnyDecoder: no open request {}", id));
      return it->second;
    }
    const SlotPtr& slot_of(RequestId id) const { return const_cast<Holder*>(this)->slot_of(id); }
    GenerationResult finish(SlotPtr& slot) {
      auto r = slot->request.take_result();
      if constexpr (requires { parts.finish(*slot, r); }) parts.finish(*slot, r);
      return r;
    }

    void begin(RequestId id, std::span<const TokenId> prompt, const GenerationOptions& options,
               TokenCallback on_token) override {
      if (open.contains(id)) throw InvalidArgumentError(fmt::format("AnyDecoder::begin: request {} is open", id));
      auto slot = parts.slot(id, options, std::move(on_token));
      run([&] { parts.engine().begin(slot->request, prompt); });
      open.emplace(id, std::move(slot));
    }
    void step() override {
      batch.clear();
      for (auto& [id, slot] : open)
        if (slot->request.active()) batch.push_back(&slot->request);
      if (!batch.empty()) run([&] { parts.engine().step(std::span<Request* const>(batch)); });
    }
    void step(std::span<const RequestId> ids) override {
      batch.clear();
      for (const auto id : ids) batch.push_back(&slot_of(id)->request);
      if (!batch.empty()) run([&] { parts.engine().step(std::span<Request* const>(batch)); });
    }
    void abort(RequestId id) override {
      auto& slot = slot_of(id);
      run([&] { parts.engine().abort(slot->request); });
    }
    bool done(RequestId id) const override { return !slot_of(id)->request.active(); }
    const GenerationResult& result(RequestId id) const override { return slot_of(id)->request.result(); }
    GenerationResult take_result(RequestId id) override {
      auto& slot = slot_of(id);
      if (slot->request.active())
        throw InvalidArgumentError(
            fmt::format("AnyDecoder::take_result: request {} is still generating (step it until done, or abort it)", id));
      auto r = finish(slot);
      open.erase(id);
      return r;
    }
    std::vector<RequestId> requests() const override {
      std::vector<RequestId> ids;
      for (const auto& [id, slot] : open) ids.push_back(id);
      return ids;
    }
    GenerationResult generate(std::span<const TokenId> prompt, const GenerationOptions& options,
                              const TokenCallback& on_token) override {
      const RequestId id = open.empty() ? 0 : open.rbegin()->first + 1;
      auto slot = parts.slot(id, options, on_token);
      run([&] {
        auto& engine = parts.engine();
        engine.begin(slot->request, prompt);
        try {
          while (!slot->request.done()) engine.step(slot->request);
        } catch (...) {
          try {  // closed in the models before the error goes on
            engine.abort(slot->request);
          } catch (...) {  // NOLINT(bugprone-empty-catch): the first error is the one reported
          }
          throw;
        }
      });
      return finish(slot);
    }
    BatchRun generate_batch(std::span<const std::vector<TokenId>> prompts,
                            std::span<const GenerationOptions> options, std::size_t max_batch,
                            const std::function<void()>& fence) override {
      if (!open.empty())
        throw InvalidArgumentError(fmt::format(
            "AnyDecoder::generate_batch: {} requests are open (their ids would collide with the batch's)", open.size()));
      BatchRun out;
      run([&] {
        out = run_continuous_batch(
            parts.engine(), prompts, max_batch,
            [&](std::size_t i) { return parts.slot(static_cast<RequestId>(i), options[i], TokenCallback{}); },
            fence);
      });
      return out;
    }
    void set_round_view_observer(std::function<void(const RoundView&)> observer) override {
      parts.engine().set_round_view_observer(std::move(observer));
    }

    Parts parts;
    std::map<RequestId, SlotPtr> open;
    std::vector<Request*> batch;
  };

  Interface& impl() const {
    if (!impl_) throw InvalidArgumentError("AnyDecoder: empty (no method was assigned)");
    return *impl_;
  }

  std::string name_;
  std::unique_ptr<Interface> impl_;
};

}  // namespace specdec
