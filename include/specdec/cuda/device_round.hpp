// The verification half of a round on a CUDA device: the target's forward
// writes its logits into device memory, and the warp and the acceptance rule
// run there too, so only the round's trees go to the device and only the
// accepted paths come back (docs/cuda.md, "The device round").
//
// One round, on one stream:
//   1. one host-to-device copy of the batch's layout (DeviceRoundLayout: the
//      padded trees, where each forward row goes, each row's sampling and
//      each tree's random stream);
//   2. warp_rows: every forward row, with its own request's parameters, into
//      the padded [batch, nodes + 1, vocab] rows the rules read (a greedy
//      request's rows become one-hot, as on the host);
//   3. the rule's kernel over the whole batch, each tree drawing from its own
//      request's stream;
//   4. one device-to-host copy of the paths, tokens and draw counts, and the
//      one synchronisation of the round.
// On the same rows, the device emits the host rule's tokens and consumes the
// host rule's uniforms (the kernels' headers say how), so a request's stream
// moves on exactly as on the host.
//
// No CUDA headers needed (link specdec::cuda; a cudaStream_t is passed as
// void*). Throws DeviceError when the CUDA runtime fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/accept/typical_acceptance.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/verify_result.hpp"
#include "specdec/cuda/device_round_layout.hpp"

namespace specdec::cuda {

// Which rule's kernel a round runs. Every one takes ragged batches (each
// tree its own size); the chain rules take chains only.
enum class DeviceRule {
  kGreedy,              // GreedyAcceptance (greedy requests only)
  kRecursiveRejection,  // RecursiveRejectionSampling, every child mode
  kTraversal,           // TraversalVerification
  kTypical,             // TypicalAcceptance (lossy)
  kSpeculative,         // SpeculativeSampling (chains)
  kBlock,               // BlockVerification (chains)
};

const char* device_rule_name(DeviceRule rule);

// Whether the rule reads the draft rows of sampled slots (the lossless rules
// other than greedy do; greedy and typical acceptance read the target only).
constexpr bool rule_reads_draft_rows(DeviceRule rule) {
  return rule == DeviceRule::kRecursiveRejection || rule == DeviceRule::kTraversal ||
         rule == DeviceRule::kSpeculative || rule == DeviceRule::kBlock;
}

class DeviceRound {
 public:
  // `stream`: a cudaStream_t the round runs on; null: the legacy default
  // stream.
  explicit DeviceRound(void* stream = nullptr);
  ~DeviceRound();
  DeviceRound(const DeviceRound&) = delete;
  DeviceRound& operator=(const DeviceRound&) = delete;

  void* stream() const { return stream_; }

  // Device memory for the forward's logits, [rows, vocab] f32, densely
  // packed: the target writes them (item after item, DeviceRoundLayout's
  // order) before verify(). Valid until the next call with a larger size.
  float* logits(std::int64_t rows, std::int64_t vocab);
  // Device memory for the draft rows in the padded layout, [padded_rows,
  // vocab] (slot s of tree b at row b (nodes + 1) + s + 1): read by the
  // rules at sampled slots. Fill it before verify() with draft rows = true.
  float* draft_rows(std::int64_t padded_rows, std::int64_t vocab);

  // Copies the draft rows of each item's sampled slots (rows[b], indexed as
  // the tree's DraftTree::children_draft_row says) into draft_rows()' padded
  // layout: layout.draft_copies(), one asynchronous copy per run. rows[b] may
  // live in host memory (a drafter on the host) or in device memory (a
  // drafter whose model runs on the device: the copies stay on the device).
  // Throws ShapeError when a row's vocabulary is not `vocab` or an item has
  // fewer rows than its tree reads.
  void set_draft_rows(const DeviceRoundLayout& layout, std::span<const ProbRows> rows, std::int64_t vocab);
  // Copies the first `rows` rows of logits() to `host` ([rows, vocab]) and
  // waits for them: the rows of a round whose rule runs on the host.
  void download_logits(float* host, std::int64_t rows, std::int64_t vocab);

  // Runs the round for `layout` over the logits() rows (and, with
  // `with_draft_rows`, the draft_rows() rows) and writes each tree's outcome
  // to out[b] and the uniforms it used to draws_used[b].
  //
  // Throws InvalidArgumentError when the spans are not batch() long, vocab
  // does not match the buffers, a rule needs draft rows at a sampled slot
  // and none were given, or a greedy rule meets a sampled request;
  // InvalidTreeError for a tree given to a chain rule;
  // InvalidDistributionError when a row could not be warped (a NaN or +inf
  // logit, every logit -inf); InvalidTreeError when the kernel refused a
  // tree; DeviceError when the runtime fails.
  void verify(const DeviceRoundLayout& layout, DeviceRule rule, std::int64_t vocab, bool with_draft_rows,
              std::span<VerifyResult> out, std::span<std::int32_t> draws_used,
              const TypicalAcceptanceParams& typical = {});

 private:
  // A device (or pinned host) allocation that grows and never shrinks.
  struct Buffer {
    void* ptr = nullptr;
    std::size_t bytes = 0;
  };
  enum class Memory { kDevice, kDeviceZeroed, kPinnedHost };
  void* grow(Buffer& b, std::size_t bytes, Memory memory = Memory::kDevice);

  void* stream_ = nullptr;
  Buffer logits_, draft_, probs_, layout_, results_, status_;
  Buffer greedy_ws_;                   // zeroed once; the greedy kernel leaves it zeroed
  Buffer traversal_ws_;                // the traversal kernel's scratch
  Buffer host_layout_, host_results_;  // pinned: the round's two copies
  std::int64_t logits_rows_ = 0, logits_vocab_ = 0, draft_rows_ = 0, draft_vocab_ = 0;
};

}  // namespace specdec::cuda
