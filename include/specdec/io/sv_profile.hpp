// Speculative Verification's profile as a JSON file (`specdec profile-sv`
// writes it, the `sv` method reads it): the acceptance tables a run
// schedules with, profiled at one sampling setting and one way of drafting,
// with what they were measured on.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "specdec/core/sampling_params.hpp"
#include "specdec/select/acceptance_table.hpp"

namespace specdec::io {

struct SvProfile {
  std::string drafts;  // "top1" (deterministic chains) or "sample"
  float temperature = 0.0f;
  std::int32_t top_k = 0;
  float top_p = 1.0f;
  std::vector<std::int32_t> draft_lengths;  // the chain lengths profiled
  std::int64_t prompts = 0;                 // profiling prompts per length
  AcceptanceTable joint;                    // (S, A)
  AcceptanceTable similarity;               // S only
  AcceptanceEntropies entropies;            // of the samples, binned as `joint`
  std::string source;                       // what was profiled (models, prompt file)

  // True when the profile was measured at these sampling parameters.
  bool matches(const SamplingParams& s) const;
};

// The file name a profile of `sampling` and `drafts` is saved under:
// "t0.json" for greedy decoding, "t<T>[-k<K>][-p<P>]-<drafts>.json" else.
std::string sv_profile_name(const SamplingParams& sampling, const std::string& drafts);

void write_sv_profile(const std::filesystem::path& path, const SvProfile& profile);
// IoError / ModelLoadError naming the file and the field on bad input.
SvProfile read_sv_profile(const std::filesystem::path& path);

}  // namespace specdec::io
