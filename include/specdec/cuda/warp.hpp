// Logit warping on a CUDA device: temperature, top-k, top-p and softmax, row
// by row, with each row's own parameters, so that one launch serves a batch
// whose requests sample differently.
//
// The semantics are the host Warper's (core/warp.hpp), ties and the nucleus
// boundary included, and so are the numbers: the kernel computes the same
// exponentials, the same row sums (bitexact::lane_sum) and the same
// fixed-point nucleus masses, so a device row equals the host row bit for bit.
//
// No CUDA headers needed (link specdec::cuda; a cudaStream_t is passed as void*).
#pragma once

#include <cstdint>

#include "specdec/core/status.hpp"

namespace specdec::cuda {

// One row's sampling parameters: SamplingParams without the seed.
struct RowSampling {
  float temperature = 1.0f;  // 0: greedy, the row becomes one-hot at its argmax
  std::int32_t top_k = 0;    // 0 or >= vocab: off
  float top_p = 1.0f;        // 1: off
};

// What warp_rows found in a row; the row is then all zeros.
enum class WarpRowStatus : std::int32_t {
  kOk = 0,
  kNonFiniteLogit = 1,  // a NaN or +inf logit
  kAllMasked = 2,       // every logit is -inf
  kBadParams = 3,       // temperature not finite or < 0, top_k < 0, top_p outside (0, 1]
};

// Enqueues the warp of `rows` rows of `vocab` logits on `stream` and returns
// without waiting. Device memory: logits and probs [rows, vocab] (densely
// packed; probs may not alias logits), params and status [rows].
//
// With out_rows (device memory, [rows]), logits row r is warped into probs
// row out_rows[r] (its status stays status[r]): a forward's ragged rows,
// one sequence's after another, land in the padded [batch, nodes + 1]
// layout the tree rules read (DeviceRoundLayout). probs then holds every
// row named there; rows named by no r are left as they were.
//
// Returns kInvalidArgument, before touching the device, when rows < 0, vocab
// <= 0 or > 2^24, a pointer is null (for rows > 0), or rows * vocab
// overflows; kCudaError when the launch fails; kOk otherwise.
Status warp_rows(const float* logits, float* probs, const RowSampling* params, std::int32_t* status,
                 std::int32_t rows, std::int64_t vocab, void* stream = nullptr,
                 const std::int32_t* out_rows = nullptr);

}  // namespace specdec::cuda
