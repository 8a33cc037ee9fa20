#include "common.hpp"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "specdec/core/error.hpp"
#include "specdec/io/file_io.hpp"

namespace specdec::cli {

std::filesystem::path tokenizer_path(const std::filesystem::path& target,
                                     const std::filesystem::path& given) {
  if (!given.empty()) return given;
  for (const auto& d : {target, target.parent_path()})
    for (const char* name : {"tokenizer.model", "tokenizer.json"})
      if (std::filesystem::exists(d / name)) return d / name;
  throw ModelLoadError(fmt::format(
      "no tokenizer.model or tokenizer.json in {} or its parent (pass --tokenizer)", target.string()));
}

void check_draft_tokenizer(const std::filesystem::path& draft, const std::filesystem::path& used) {
  for (const char* name : {"tokenizer.model", "tokenizer.json"}) {
    const auto own = draft / name;
    if (!std::filesystem::exists(own)) continue;
    if (std::filesystem::exists(used) && std::filesystem::equivalent(own, used)) return;
    if (io::read_text_file(own) != io::read_text_file(used))
      throw InvalidArgumentError(fmt::format(
          "the draft's tokenizer {} differs from the one in use, {}: the draft's token ids would be verified "
          "as another vocabulary's (give both models one tokenizer, name the one to use with --tokenizer, or "
          "draft across vocabularies with --method slem:draft=DIR or tli:draft=DIR)",
          own.string(), used.string()));
    return;
  }
}

std::vector<std::string> model_devices() {
  std::vector<std::string> out;
#if SPECDEC_CLI_WITH_TORCH
  out.emplace_back("cpu");
#endif
#if SPECDEC_CLI_WITH_CUDA
  out.emplace_back("cuda");
#endif
  return out;
}

void check_device(const std::string& command, const std::string& device) {
  const auto devices = model_devices();
  if (std::find(devices.begin(), devices.end(), device) == devices.end())
    throw InvalidArgumentError(fmt::format("{}--device {}: this build runs models on {}", command, device,
                                           fmt::join(devices, ", ")));
}

void add_device_option(CLI::App& cmd, std::string& device) {
  const auto devices = model_devices();
  device = devices.empty() ? "" : devices.front();
  cmd.add_option("--device", device,
                 fmt::format("where the models run: {} (in this build)", fmt::join(devices, ", ")))
      ->capture_default_str();
}

void add_sampling_options(CLI::App& cmd, SamplingParams& sampling) {
  cmd.add_option("--temperature", sampling.temperature, "0 = greedy");
  cmd.add_option("--top-k", sampling.top_k, "0 = off");
  cmd.add_option("--top-p", sampling.top_p, "1 = off");
  cmd.add_option("--seed", sampling.seed, "sampling seed");
}

void add_dtype_option(CLI::App& cmd, std::string& dtype, const std::string& what) {
  cmd.add_option(
         "--dtype", dtype,
         "inference weights: auto (bf16 on a GPU, and on a CPU that runs it natively; else f32), f32 (the "
         "reference) or bf16" +
             what)
      ->capture_default_str();
}

void print_stats(const std::string& label, const Stats& st) {
  const auto& a = st.acceptance;
  std::string depths;
  for (std::size_t d = 1; d <= a.depth_tried.size() && d <= 8; ++d)
    depths += fmt::format("{}{:.2f}", d > 1 ? " " : "", a.conditional_acceptance(d));
  std::printf("[%s] %lld tokens in %.3f s | %.1f tokens/s | first token %.1f ms | stopped: %s\n",
              label.c_str(), static_cast<long long>(st.new_tokens), st.total_seconds, st.tokens_per_second(),
              1e3 * st.time_to_first_token_seconds, to_string(st.stop_reason));
  if (a.num_rounds > 0 && a.num_rounds != st.new_tokens)
    std::printf(
        "  rounds %lld | tau %.2f tokens/round | acceptance %.2f | per depth [%s] | zero-accept %lld\n",
        static_cast<long long>(a.num_rounds), a.mean_emitted(), a.acceptance_rate(), depths.c_str(),
        static_cast<long long>(a.num_zero_accept));
  std::printf("  time: prefill %.1f ms | draft %.1f ms | verify %.1f ms | accept %.1f ms\n",
              1e3 * st.prefill_seconds, 1e3 * st.draft_seconds, 1e3 * st.verify_seconds,
              1e3 * st.accept_seconds);
  if (st.target_forwards > 0)
    std::printf(
        "  models: target %lld forwards, %.1f ms (%.2f ms each) | draft %lld forwards, %.1f ms | "
        "library overhead %.1f us/round (%.1f%% of a target forward)\n",
        static_cast<long long>(st.target_forwards), 1e3 * st.target_model_seconds,
        1e3 * st.target_forward_seconds(), static_cast<long long>(st.draft_forwards),
        1e3 * st.draft_model_seconds, 1e6 * st.overhead_per_round_seconds(),
        st.target_forward_seconds() > 0
            ? 100.0 * st.overhead_per_round_seconds() / st.target_forward_seconds()
            : 0.0);
  if (st.draft_layer_seconds > 0 && a.num_rounds > 0) {
    const double r = static_cast<double>(a.num_rounds);
    std::printf(
        "  draft head per round: layer %.3f ms | LM head %.3f ms | sampling / tree building %.3f ms\n",
        1e3 * st.draft_layer_seconds / r, 1e3 * st.draft_head_seconds / r,
        1e3 * st.draft_other_seconds() / r);
  }
  if (st.lag.rounds > 0) {
    const auto& l = st.lag;
    const double r = static_cast<double>(l.rounds);
    std::printf(
        "  lag: tails %lld nodes, %lld accepted | whole tails %lld, a drafted sequence chosen %lld, stale "
        "%lld "
        "| %.2f sequences per tip\n",
        static_cast<long long>(l.tail_nodes), static_cast<long long>(l.tail_accepted),
        static_cast<long long>(l.tips), static_cast<long long>(l.chosen), static_cast<long long>(l.stale),
        l.tips > 0 ? double(l.sequences_drafted) / double(l.tips) : 0.0);
    std::printf(
        "  per round: target forward %.3f ms | draft %.3f ms | target waited %.3f ms | draft idle %.3f ms\n",
        1e3 * l.score_seconds / r, 1e3 * l.draft_seconds / r, 1e3 * l.target_wait_seconds / r,
        1e3 * l.draft_idle_seconds / r);
  }
  if (st.resampling.trees > 0)
    std::printf(
        "  re-sampling: %lld trees, %lld nodes verified, %lld tokens accepted from them, %lld separate "
        "target forwards\n",
        static_cast<long long>(st.resampling.trees), static_cast<long long>(st.resampling.nodes),
        static_cast<long long>(st.resampling.accepted),
        static_cast<long long>(st.resampling.separate_forwards));
}

void write_text_file(const std::filesystem::path& path, std::string_view text) {
  io::write_text_atomically(path, text);
}

void check_writable(const std::filesystem::path& path) {
  if (path.empty()) return;
  auto probe = path;
  probe += ".probe";
  try {
    write_text_file(probe, "");
  } catch (const IoError& e) {
    throw IoError(fmt::format("{}: cannot be written ({})", path.string(), e.what()));
  }
  std::error_code ignored;
  std::filesystem::remove(probe, ignored);
}

}  // namespace specdec::cli
