// torch.ops.specdec on CUDA tensors: the operators torch_ops.cpp declares,
// launched on PyTorch's current stream through specdec's CUDA launchers
// (include/specdec/cuda/). Nothing here waits for the device: as in the
// launchers, a tree or request the kernel refuses is flagged in the outputs
// (num_accepted -1, kNoToken), a bad warp row in its status, where the CPU
// kernels raise. Every row draws from its own (seed_b, b, offset_b) through
// the launchers' tree_streams, so both devices emit the same tokens.
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/version.h>

#include <limits>

#include "specdec/cuda/block_verification.hpp"
#include "specdec/cuda/chain_speculative_sampling.hpp"
#include "specdec/cuda/greedy_verification.hpp"
#include "specdec/cuda/recursive_rejection_sampling.hpp"
#include "specdec/cuda/traversal_verification.hpp"
#include "specdec/cuda/typical_acceptance.hpp"
#include "specdec/cuda/warp.hpp"
#include "torch_ops.hpp"

namespace specdec::torch_ops {
namespace {

// PyTorch's current stream on `device`, as a cudaStream_t. c10::Stream gives
// its native handle from torch 2.1 on. Before that only c10_cuda maps a
// stream to its handle, and a CPU build of libtorch (Debian's 1.13) has no
// c10_cuda to link: there, the default stream (id 0, the legacy default
// stream) is null, and any other is refused.
void* current_stream(const c10::Device& device) {
  const c10::Stream stream = c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(device);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  return stream.native_handle();
#else
  if (stream.id() == 0) return nullptr;
  throw UnsupportedError(
      "torch.ops.specdec on a CUDA stream other than the default needs torch >= 2.1 "
      "(c10::Stream::native_handle)");
#endif
}

void check(Status s, std::string_view what) {
  if (s == Status::kInvalidArgument)
    throw InvalidArgumentError(
        fmt::format("{}: the CUDA launcher refused the arguments (see its header)", what));
  if (s != Status::kOk)
    throw DeviceError(fmt::format("{}: the kernel launch failed ({})", what, status_string(s)));
}

std::int32_t narrow(std::int64_t v, std::string_view what) {
  if (v > std::numeric_limits<std::int32_t>::max())
    throw ShapeError(fmt::format("{} is {}, beyond int32", what, v));
  return static_cast<std::int32_t>(v);
}

template <class T>
T* ptr(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}
template <class T>
T* ptr(const OptTensor& t) {
  return t.has_value() ? t->data_ptr<T>() : nullptr;
}

const PhiloxUniforms* streams_of(const Tensor& philox) {
  return reinterpret_cast<const PhiloxUniforms*>(philox.data_ptr<std::int64_t>());
}

// Zeroed device memory the greedy and traversal kernels need (they leave it zeroed).
Tensor workspace(std::size_t bytes, const c10::Device& device) {
  return at::zeros({static_cast<std::int64_t>(bytes) + 16},
                   at::TensorOptions().dtype(at::kByte).device(device));
}
void* aligned(const Tensor& w) {
  auto p = reinterpret_cast<std::uintptr_t>(w.data_ptr());
  return reinterpret_cast<void*>((p + 15) & ~std::uintptr_t{15});
}

std::tuple<Tensor, Tensor> warp_cuda(const Tensor& logits, const Tensor& temperature, const Tensor& top_k,
                                     const Tensor& top_p) {
  return typed_errors([&] {
    const WarpArgs a(logits, temperature, top_k, top_p);
    const c10::DeviceGuard guard(a.logits.device());
    // RowSampling is {float, int32, float}: the three columns, bit for bit.
    const Tensor params =
        at::stack({a.temperature.view(at::kInt), a.top_k, a.top_p.view(at::kInt)}, 1).contiguous();
    static_assert(sizeof(cuda::RowSampling) == 3 * sizeof(std::int32_t));
    Tensor probs = at::empty({a.rows, a.vocab}, a.logits.options());
    Tensor status = at::empty({a.rows}, a.logits.options().dtype(at::kInt));
    check(cuda::warp_rows(a.logits.data_ptr<float>(), probs.data_ptr<float>(),
                          reinterpret_cast<const cuda::RowSampling*>(params.data_ptr<std::int32_t>()),
                          status.data_ptr<std::int32_t>(), narrow(a.rows, "rows"), a.vocab,
                          current_stream(a.logits.device())),
          "warp");
    return std::tuple<Tensor, Tensor>{probs, status};
  });
}

using ChainLauncher = Status (*)(const float*, const TokenId*, const float*, TokenId*, std::int32_t*,
                                 std::int32_t, std::int32_t, std::int64_t, std::uint64_t, std::uint64_t,
                                 void*, const PhiloxUniforms*);

template <ChainLauncher launch>
std::tuple<Tensor, Tensor> chain_cuda(const OptTensor& draft_probs, const Tensor& draft_token_ids,
                                      const Tensor& target_probs, const OptTensor& seed_arr,
                                      std::int64_t seed, const OptTensor& offset_arr, std::int64_t offset) {
  return typed_errors([&] {
    const ChainArgs a(draft_probs, draft_token_ids, target_probs);
    const c10::DeviceGuard guard(a.target.device());
    const Tensor philox = RowSeeds(seed_arr, seed, offset_arr, offset, a.batch, a.target.device()).philox();
    const auto ints = a.target.options().dtype(at::kInt);
    Tensor output = at::empty({a.batch, a.gamma + 1}, ints);
    Tensor emitted_drafts = at::empty({a.batch}, ints);
    check(launch(ptr<float>(a.draft), a.tokens.data_ptr<std::int32_t>(), a.target.data_ptr<float>(),
                 output.data_ptr<std::int32_t>(), emitted_drafts.data_ptr<std::int32_t>(),
                 narrow(a.batch, "batch"), narrow(a.gamma, "num_speculate_tokens"), a.vocab, 0, 0,
                 current_stream(a.target.device()), streams_of(philox)),
          "chain rule");
    return std::tuple<Tensor, Tensor>{output, emitted_drafts};
  });
}

TreeOutcome verify_trees_cuda(c10::string_view rule, const Tensor& parents, const Tensor& tokens,
                              const Tensor& slot_draws, const OptTensor& draft_probs,
                              const Tensor& target_probs, const OptTensor& tree_nodes, std::int64_t max_depth,
                              const OptTensor& seed_arr, std::int64_t seed, const OptTensor& offset_arr,
                              std::int64_t offset, double posterior_threshold, double posterior_alpha) {
  return typed_errors([&] {
    const FlatTreeArgs a(rule, parents, tokens, slot_draws, draft_probs, target_probs, tree_nodes, max_depth);
    const c10::Device device = a.target.device();
    const c10::DeviceGuard guard(device);
    const Tensor philox = RowSeeds(seed_arr, seed, offset_arr, offset, a.batch, device).philox();
    TreeOutcome out = a.outputs();
    if (a.batch == 0) return out;
    void* stream = current_stream(device);
    const auto batch = narrow(a.batch, "batch"), nodes = narrow(a.nodes, "nodes"),
               depth = narrow(a.max_depth, "max_depth");
    const auto* p = a.parents.data_ptr<std::int32_t>();
    const auto* t = a.tokens.data_ptr<std::int32_t>();
    const auto* draws = a.slot_draws.data_ptr<std::uint8_t>();
    const float* q = ptr<float>(a.draft);
    const float* target = a.target.data_ptr<float>();
    const std::int32_t* sizes = ptr<std::int32_t>(a.tree_nodes);
    auto* accepted = std::get<0>(out).data_ptr<std::int32_t>();
    auto* num_accepted = std::get<1>(out).data_ptr<std::int32_t>();
    auto* emitted = std::get<2>(out).data_ptr<std::int32_t>();
    const PhiloxUniforms* streams = streams_of(philox);
    Status s = Status::kOk;
    if (a.rule == "greedy") {
      const std::size_t bytes = cuda::greedy_verification_workspace_bytes(batch, nodes);
      if (bytes == 0) throw InvalidArgumentError("greedy: batch * (nodes + 1) exceeds 65535");
      const Tensor w = workspace(bytes, device);
      s = cuda::greedy_verification(target, p, t, sizes, accepted, num_accepted, emitted, batch, nodes, depth,
                                    a.vocab, aligned(w), bytes, stream);
    } else if (a.rule == "speculative_sampling") {
      s = cuda::chain_speculative_sampling_flat(p, t, draws, q, target, sizes, accepted, num_accepted,
                                                emitted, batch, nodes, depth, a.vocab, 0, 0, stream, streams);
    } else if (a.rule == "block_verification") {
      s = cuda::block_verification_flat(p, t, draws, q, target, sizes, accepted, num_accepted, emitted, batch,
                                        nodes, depth, a.vocab, 0, 0, stream, streams);
    } else if (a.rule == "recursive_rejection_sampling") {
      const Tensor draws_used = at::empty({a.batch}, a.target.options().dtype(at::kInt));
      s = cuda::recursive_rejection_sampling(p, t, draws, q, target, sizes, accepted, num_accepted, emitted,
                                             draws_used.data_ptr<std::int32_t>(), batch, nodes, depth,
                                             a.vocab, 0, 0, stream, streams);
    } else if (a.rule == "traversal_verification") {
      const std::size_t bytes = cuda::traversal_verification_workspace_bytes(batch, depth, a.vocab);
      if (bytes == 0) throw InvalidArgumentError("traversal_verification: the workspace size overflows");
      const Tensor w = workspace(bytes, device);
      s = cuda::traversal_verification(p, t, draws, q, target, sizes, accepted, num_accepted, emitted, batch,
                                       nodes, depth, a.vocab, aligned(w), bytes, 0, 0, stream, streams);
    } else {
      s = cuda::typical_acceptance(p, t, target, sizes, accepted, num_accepted, emitted, batch, nodes, depth,
                                   a.vocab, static_cast<float>(posterior_threshold),
                                   static_cast<float>(posterior_alpha), 0, 0, stream, streams);
    }
    check(s, a.rule);
    return out;
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(specdec, CUDA, m) {
  m.impl("warp", &warp_cuda);
  m.impl("chain_speculative_sampling", &chain_cuda<&cuda::chain_speculative_sampling>);
  m.impl("block_verification", &chain_cuda<&cuda::block_verification>);
  m.impl("verify_trees", &verify_trees_cuda);
}

}  // namespace specdec::torch_ops
