// DeviceRound: the round's copies, launches and one synchronisation
// (include/specdec/cuda/device_round.hpp). Host code over the CUDA runtime.
#include "specdec/cuda/device_round.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/cuda/block_verification.hpp"
#include "specdec/cuda/chain_speculative_sampling.hpp"
#include "specdec/cuda/greedy_verification.hpp"
#include "specdec/cuda/recursive_rejection_sampling.hpp"
#include "specdec/cuda/traversal_verification.hpp"
#include "specdec/cuda/typical_acceptance.hpp"
#include "specdec/cuda/warp.hpp"

namespace specdec::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw DeviceError(fmt::format("DeviceRound: {} failed: {}", what, cudaGetErrorString(e)));
}

// A launcher's status: its arguments were refused (a shape the kernel does
// not take), or the launch failed.
void check(Status s, DeviceRule rule, std::int32_t batch, std::int32_t nodes, std::int64_t vocab) {
  if (s == Status::kOk) return;
  if (s == Status::kInvalidArgument)
    throw InvalidArgumentError(
        fmt::format("DeviceRound: the {} kernel does not take {} trees of up to {} nodes at "
                    "vocabulary {}",
                    device_rule_name(rule), batch, nodes, vocab));
  throw DeviceError(fmt::format("DeviceRound: launching the {} kernel failed: {}", device_rule_name(rule),
                                cudaGetErrorString(cudaGetLastError())));
}

template <class T>
T* at(void* base, std::size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

const char* warp_status_name(std::int32_t s) {
  switch (static_cast<WarpRowStatus>(s)) {
    case WarpRowStatus::kOk:
      return "ok";
    case WarpRowStatus::kNonFiniteLogit:
      return "a NaN or +inf logit";
    case WarpRowStatus::kAllMasked:
      return "every logit -inf";
    case WarpRowStatus::kBadParams:
      return "sampling parameters outside their domain";
  }
  return "an unknown status";
}

}  // namespace

const char* device_rule_name(DeviceRule rule) {
  switch (rule) {
    case DeviceRule::kGreedy:
      return "greedy";
    case DeviceRule::kRecursiveRejection:
      return "recursive rejection sampling";
    case DeviceRule::kTraversal:
      return "traversal verification";
    case DeviceRule::kTypical:
      return "typical acceptance";
    case DeviceRule::kSpeculative:
      return "speculative sampling";
    case DeviceRule::kBlock:
      return "block verification";
  }
  return "unknown rule";
}

DeviceRound::DeviceRound(void* stream) : stream_(stream) {}

DeviceRound::~DeviceRound() {
  // Nothing may still use the buffers; errors here cannot be reported.
  (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  for (Buffer* b : {&logits_, &draft_, &probs_, &layout_, &results_, &status_, &greedy_ws_, &traversal_ws_})
    (void)cudaFree(b->ptr);
  (void)cudaFreeHost(host_layout_.ptr);
  (void)cudaFreeHost(host_results_.ptr);
}

void* DeviceRound::grow(Buffer& b, std::size_t bytes, Memory memory) {
  bytes = std::max<std::size_t>(bytes, 16);
  if (bytes <= b.bytes) return b.ptr;
  // The stream may still use the old buffer (a round is synchronised at its
  // end, but a host's forward may have been enqueued since).
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize");
  const bool pinned = memory == Memory::kPinnedHost;
  check(pinned ? cudaFreeHost(b.ptr) : cudaFree(b.ptr), "freeing a buffer");
  b = Buffer{};
  check(pinned ? cudaMallocHost(&b.ptr, bytes) : cudaMalloc(&b.ptr, bytes), pinned ? "cudaMallocHost" : "cudaMalloc");
  b.bytes = bytes;
  if (memory == Memory::kDeviceZeroed) check(cudaMemset(b.ptr, 0, bytes), "cudaMemset");
  return b.ptr;
}

float* DeviceRound::logits(std::int64_t rows, std::int64_t vocab) {
  if (rows < 0 || vocab <= 0)
    throw InvalidArgumentError(fmt::format("DeviceRound::logits: {} rows of vocabulary {}", rows, vocab));
  logits_vocab_ = vocab;
  logits_rows_ = rows;
  return static_cast<float*>(grow(logits_, static_cast<std::size_t>(rows * vocab) * sizeof(float)));
}

float* DeviceRound::draft_rows(std::int64_t padded_rows, std::int64_t vocab) {
  if (padded_rows < 0 || vocab <= 0)
    throw InvalidArgumentError(
        fmt::format("DeviceRound::draft_rows: {} rows of vocabulary {}", padded_rows, vocab));
  draft_vocab_ = vocab;
  draft_rows_ = padded_rows;
  return static_cast<float*>(grow(draft_, static_cast<std::size_t>(padded_rows * vocab) * sizeof(float)));
}

void DeviceRound::set_draft_rows(const DeviceRoundLayout& layout, std::span<const ProbRows> rows, std::int64_t vocab) {
  if (rows.size() != static_cast<std::size_t>(layout.batch()))
    throw ShapeError(
        fmt::format("DeviceRound::set_draft_rows: {} trees but draft rows for {}", layout.batch(), rows.size()));
  for (const DraftRowCopy& c : layout.draft_copies()) {
    const ProbRows& r = rows[static_cast<std::size_t>(c.item)];
    if (r.vocab() != vocab)
      throw ShapeError(fmt::format("DeviceRound::set_draft_rows: tree {}'s draft rows have vocabulary {}, the round {}",
                                   c.item, r.vocab(), vocab));
    if (r.num_rows() < c.source_row + c.rows)
      throw ShapeError(fmt::format("DeviceRound::set_draft_rows: tree {} reads draft row {}, and its drafter gave {}",
                                   c.item, c.source_row + c.rows - 1, r.num_rows()));
  }
  float* dev = draft_rows(layout.padded_rows(), vocab);
  const auto s = static_cast<cudaStream_t>(stream_);
  // cudaMemcpyDefault: the runtime tells host rows (a drafter on the host)
  // from device rows (a drafter whose model runs on the device) by address.
  for (const DraftRowCopy& c : layout.draft_copies()) {
    const ProbRows& r = rows[static_cast<std::size_t>(c.item)];
    check(cudaMemcpy2DAsync(dev + c.padded_row * vocab, static_cast<std::size_t>(vocab) * sizeof(float),
                            r.row(c.source_row).data(), static_cast<std::size_t>(r.row_stride()) * sizeof(float),
                            static_cast<std::size_t>(vocab) * sizeof(float), static_cast<std::size_t>(c.rows),
                            cudaMemcpyDefault, s),
          "cudaMemcpy2DAsync (draft rows)");
  }
}

void DeviceRound::download_logits(float* host, std::int64_t rows, std::int64_t vocab) {
  if (vocab != logits_vocab_ || rows < 0 || rows > logits_rows_)
    throw InvalidArgumentError(fmt::format("DeviceRound::download_logits: {} rows of vocabulary {}, but logits() holds "
                                           "{} of vocabulary {}",
                                           rows, vocab, logits_rows_, logits_vocab_));
  if (rows == 0) return;
  const auto s = static_cast<cudaStream_t>(stream_);
  check(cudaMemcpyAsync(host, logits_.ptr, static_cast<std::size_t>(rows * vocab) * sizeof(float),
                        cudaMemcpyDeviceToHost, s),
        "cudaMemcpyAsync (logits)");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize (logits)");
}

void DeviceRound::verify(const DeviceRoundLayout& layout, DeviceRule rule, std::int64_t vocab,
                         bool with_draft_rows, std::span<VerifyResult> out,
                         std::span<std::int32_t> draws_used, const TypicalAcceptanceParams& typical) {
  const std::int32_t batch = layout.batch();
  if (out.size() != static_cast<std::size_t>(batch) || draws_used.size() != static_cast<std::size_t>(batch))
    throw InvalidArgumentError(fmt::format("DeviceRound::verify: {} trees but {} results and {} draw counts",
                                           batch, out.size(), draws_used.size()));
  if (batch == 0) return;
  const FlatTrees& trees = layout.trees();
  const std::int32_t nodes = trees.nodes(), max_depth = trees.max_depth();
  const std::int64_t rows = layout.forward_rows();
  if (vocab != logits_vocab_ || rows > logits_rows_)
    throw InvalidArgumentError(
        fmt::format("DeviceRound::verify: the round has {} rows of vocabulary {}, but logits() "
                    "holds {} of vocabulary {}",
                    rows, vocab, logits_rows_, logits_vocab_));
  if (with_draft_rows && (vocab != draft_vocab_ || layout.padded_rows() > draft_rows_))
    throw InvalidArgumentError(
        fmt::format("DeviceRound::verify: the round reads {} draft rows of vocabulary {}, but "
                    "draft_rows() holds {} of vocabulary {}",
                    layout.padded_rows(), vocab, draft_rows_, draft_vocab_));
  if (rule == DeviceRule::kGreedy)
    for (std::size_t r = 0; r < layout.row_params().size(); ++r)
      if (layout.row_params()[r].temperature != 0.0f)
        throw InvalidArgumentError(
            fmt::format("DeviceRound::verify: the greedy rule verifies greedy requests only, but row {} is "
                        "sampled at T = {}",
                        r, layout.row_params()[r].temperature));
  const bool sampled_slots =
      std::any_of(trees.draws().begin(), trees.draws().end(), [](auto d) { return d != 0; });
  if (sampled_slots && !with_draft_rows && rule_reads_draft_rows(rule))
    throw InvalidArgumentError(
        fmt::format("DeviceRound::verify: {} reads the draft rows of sampled slots, and the round has some "
                    "but no draft rows",
                    device_rule_name(rule)));
  if (rule == DeviceRule::kSpeculative || rule == DeviceRule::kBlock)
    for (std::int32_t b = 0; b < batch; ++b)
      for (std::int32_t i = 0; i < trees.sizes()[static_cast<std::size_t>(b)]; ++i)
        if (trees.parents()[static_cast<std::size_t>(b) * static_cast<std::size_t>(nodes) +
                            static_cast<std::size_t>(i)] != i - 1)
          throw InvalidTreeError(fmt::format(
              "DeviceRound::verify: {} verifies chains, and tree {} is not one (node {} is not its "
              "predecessor's child); use recursive rejection sampling or traversal verification",
              device_rule_name(rule), b, i));

  const auto s = static_cast<cudaStream_t>(stream_);
  // 1. The layout, in one copy from pinned memory.
  const auto blob = layout.blob();
  void* host_layout = grow(host_layout_, blob.size(), Memory::kPinnedHost);
  std::memcpy(host_layout, blob.data(), blob.size());
  void* dev_layout = grow(layout_, blob.size());
  check(cudaMemcpyAsync(dev_layout, host_layout, blob.size(), cudaMemcpyHostToDevice, s),
        "cudaMemcpyAsync (layout)");
  const auto& o = layout.offsets();
  const auto* parents = at<const std::int32_t>(dev_layout, o.parents);
  const auto* tokens = at<const TokenId>(dev_layout, o.tokens);
  const auto* draws = at<const std::uint8_t>(dev_layout, o.draws);
  const auto* sizes = at<const std::int32_t>(dev_layout, o.sizes);
  const auto* out_rows = at<const std::int32_t>(dev_layout, o.out_rows);
  const auto* params = at<const RowSampling>(dev_layout, o.params);
  const auto* streams = at<const PhiloxUniforms>(dev_layout, o.streams);

  // 2. The warp, ragged forward rows into the padded layout.
  auto* probs = static_cast<float*>(
      grow(probs_, static_cast<std::size_t>(layout.padded_rows() * vocab) * sizeof(float)));
  const auto status_bytes = static_cast<std::size_t>(rows) * sizeof(std::int32_t);
  auto* status = static_cast<std::int32_t*>(grow(status_, status_bytes));
  const Status warped = warp_rows(static_cast<const float*>(logits_.ptr), probs, params, status,
                                  static_cast<std::int32_t>(rows), vocab, stream_, out_rows);
  if (warped == Status::kInvalidArgument)
    throw InvalidArgumentError(
        fmt::format("DeviceRound: the warp kernel does not take {} rows of vocabulary {}", rows, vocab));
  if (warped != Status::kOk)
    throw DeviceError(fmt::format("DeviceRound: launching the warp kernel failed: {}",
                                  cudaGetErrorString(cudaGetLastError())));

  // 3. The rule.
  const auto r = layout.result_offsets();
  void* results = grow(results_, r.bytes + status_bytes + 16);
  auto* accepted = at<std::int32_t>(results, r.accepted_nodes);
  auto* num_accepted = at<std::int32_t>(results, r.num_accepted);
  auto* emitted = at<TokenId>(results, r.emitted);
  auto* used = at<std::int32_t>(results, r.draws_used);
  const float* draft = with_draft_rows ? static_cast<const float*>(draft_.ptr) : nullptr;
  // The uniforms a tree drew, for the kernels that do not count them: a
  // fixed number, or (chain rules, traversal) one per node and one more.
  std::int32_t fixed_draws = -1;
  bool draws_per_node = false;
  switch (rule) {
    case DeviceRule::kGreedy: {
      const auto bytes = greedy_verification_workspace_bytes(batch, nodes);
      if (bytes == 0) check(Status::kInvalidArgument, rule, batch, nodes, vocab);
      void* ws = grow(greedy_ws_, bytes, Memory::kDeviceZeroed);
      check(greedy_verification(probs, parents, tokens, sizes, accepted, num_accepted, emitted, batch, nodes,
                                max_depth, vocab, ws, greedy_ws_.bytes, stream_),
            rule, batch, nodes, vocab);
      fixed_draws = 0;
      break;
    }
    case DeviceRule::kRecursiveRejection:
      check(
          recursive_rejection_sampling(parents, tokens, draws, draft, probs, sizes, accepted, num_accepted,
                                       emitted, used, batch, nodes, max_depth, vocab, 0, 0, stream_, streams),
          rule, batch, nodes, vocab);
      break;
    case DeviceRule::kTraversal: {
      const auto bytes = traversal_verification_workspace_bytes(batch, max_depth, vocab);
      if (bytes == 0) check(Status::kInvalidArgument, rule, batch, nodes, vocab);
      void* ws = grow(traversal_ws_, bytes);
      check(
          traversal_verification(parents, tokens, draws, draft, probs, sizes, accepted, num_accepted, emitted, batch,
                                 nodes, max_depth, vocab, ws, traversal_ws_.bytes, 0, 0, stream_, streams),
          rule, batch, nodes, vocab);
      draws_per_node = true;
      break;
    }
    case DeviceRule::kSpeculative:
      check(chain_speculative_sampling_flat(parents, tokens, draws, draft, probs, sizes, accepted, num_accepted,
                                            emitted, batch, nodes, max_depth, vocab, 0, 0, stream_, streams),
            rule, batch, nodes, vocab);
      draws_per_node = true;
      break;
    case DeviceRule::kBlock:
      check(block_verification_flat(parents, tokens, draws, draft, probs, sizes, accepted, num_accepted, emitted,
                                    batch, nodes, max_depth, vocab, 0, 0, stream_, streams),
            rule, batch, nodes, vocab);
      draws_per_node = true;
      break;
    case DeviceRule::kTypical:
      check(typical_acceptance(parents, tokens, probs, sizes, accepted, num_accepted, emitted, batch, nodes,
                               max_depth, vocab, typical.posterior_threshold, typical.posterior_alpha, 0, 0,
                               stream_, streams),
            rule, batch, nodes, vocab);
      fixed_draws = 1;
      break;
  }

  // 4. The outcome and the warp's statuses, in one copy back; the round's
  //    one synchronisation.
  const std::size_t status_at = (r.bytes + 15) / 16 * 16;
  check(cudaMemcpyAsync(at<char>(results, status_at), status, status_bytes, cudaMemcpyDeviceToDevice, s),
        "cudaMemcpyAsync (statuses)");
  void* host = grow(host_results_, status_at + status_bytes, Memory::kPinnedHost);
  check(cudaMemcpyAsync(host, results, status_at + status_bytes, cudaMemcpyDeviceToHost, s),
        "cudaMemcpyAsync (results)");
  check(cudaStreamSynchronize(s), "the round (cudaStreamSynchronize)");

  const auto* row_status = at<const std::int32_t>(host, status_at);
  for (std::int32_t b = 0; b < batch; ++b) {
    const std::int64_t first = layout.first_row(b);
    const std::int64_t n = std::int64_t{trees.sizes()[static_cast<std::size_t>(b)]} + 1;
    for (std::int64_t i = first; i < first + n; ++i)
      if (row_status[i] != 0)
        throw InvalidDistributionError(fmt::format("DeviceRound: row {} of tree {} could not be warped: {}",
                                                   i - first, b, warp_status_name(row_status[i])));
  }
  const std::span<const std::byte> bytes(static_cast<const std::byte*>(host), r.bytes);
  for (std::int32_t b = 0; b < batch; ++b) {
    const std::int32_t counted = layout.decode(b, bytes, out[static_cast<std::size_t>(b)]);
    draws_used[static_cast<std::size_t>(b)] =
        draws_per_node ? trees.sizes()[static_cast<std::size_t>(b)] + 1 : fixed_draws >= 0 ? fixed_draws : counted;
  }
}

}  // namespace specdec::cuda
