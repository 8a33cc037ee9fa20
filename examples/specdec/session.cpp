#include "session.hpp"

#include <ATen/Parallel.h>

#include <cstdio>
#include <span>
#include <string_view>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/io/file_io.hpp"
#include "specdec/torch/threads.hpp"

namespace specdec::cli {
namespace {

std::filesystem::path find_tokenizer(const std::filesystem::path& dir) {
  for (const auto& d : {dir, dir.parent_path()})
    for (const char* name : {"tokenizer.model", "tokenizer.json"})
      if (std::filesystem::exists(d / name)) return d / name;
  throw ModelLoadError(fmt::format("no tokenizer.model or tokenizer.json in {} or its parent (pass --tokenizer)",
                                   dir.string()));
}

// A tokenizer the draft's own directory holds (not its parent's, which
// models/ shares) that differs from the one the session uses: speculative
// decoding verifies the draft's token ids as the target's, so the two must
// be one vocabulary, not only one size (InvalidArgumentError naming both).
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

}  // namespace

void add_sampling_options(CLI::App& cmd, SamplingParams& sampling) {
  cmd.add_option("--temperature", sampling.temperature, "0 = greedy");
  cmd.add_option("--top-k", sampling.top_k, "0 = off");
  cmd.add_option("--top-p", sampling.top_p, "1 = off");
  cmd.add_option("--seed", sampling.seed, "sampling seed");
}

Session load_session(const std::filesystem::path& target, const std::filesystem::path& draft,
                     const std::filesystem::path& tokenizer, int threads, const std::string& dtype) {
  // Forwards run on specdec's own threads (threads.hpp); ATen's count is for
  // the few ATen operations around them.
  torch_backend::set_default_forward_threads(threads);
  if (threads > 0) at::set_num_threads(threads);
  const auto precision = torch_backend::choose_inference_dtype(dtype);
  if (!precision.note.empty()) std::fprintf(stderr, "specdec: %s\n", precision.note.c_str());
  const auto tok_path = tokenizer.empty() ? find_tokenizer(target) : tokenizer;
  Session s{tokenizer::Tokenizer::load(tok_path), tok_path, torch_backend::LlamaModel::load(target), std::nullopt};
  s.target.check_tokenizer_vocab(s.tokenizer.vocab_size(), tok_path.string());
  s.target.set_inference_dtype(precision.dtype);
  if (!draft.empty()) {
    if (tokenizer.empty()) check_draft_tokenizer(draft, tok_path);  // --tokenizer: the caller's choice
    s.draft = torch_backend::LlamaModel::load(draft);
    s.draft->check_tokenizer_vocab(s.tokenizer.vocab_size(), tok_path.string());
    s.draft->set_inference_dtype(precision.dtype);
  }
  return s;
}

void add_dtype_option(CLI::App& cmd, std::string& dtype, const std::string& what) {
  cmd.add_option("--dtype", dtype,
                 "inference weights: auto (bf16 where the CPU runs it natively, else f32), f32 (the reference) or "
                 "bf16" + what)
      ->capture_default_str();
}

void print_stats(const std::string& label, const Stats& st) {
  const auto& a = st.acceptance;
  std::string depths;
  for (std::size_t d = 1; d <= a.depth_tried.size() && d <= 8; ++d)
    depths += fmt::format("{}{:.2f}", d > 1 ? " " : "", a.conditional_acceptance(d));
  std::printf("[%s] %lld tokens in %.3f s | %.1f tokens/s | first token %.1f ms | stopped: %s\n", label.c_str(),
              static_cast<long long>(st.new_tokens), st.total_seconds, st.tokens_per_second(),
              1e3 * st.time_to_first_token_seconds, to_string(st.stop_reason));
  if (a.num_rounds > 0 && a.num_rounds != st.new_tokens)
    std::printf("  rounds %lld | tau %.2f tokens/round | acceptance %.2f | per depth [%s] | zero-accept %lld\n",
                static_cast<long long>(a.num_rounds), a.mean_emitted(), a.acceptance_rate(), depths.c_str(),
                static_cast<long long>(a.num_zero_accept));
  std::printf("  time: prefill %.1f ms | draft %.1f ms | verify %.1f ms | accept %.1f ms\n", 1e3 * st.prefill_seconds,
              1e3 * st.draft_seconds, 1e3 * st.verify_seconds, 1e3 * st.accept_seconds);
  if (st.target_forwards > 0)
    std::printf("  models: target %lld forwards, %.1f ms (%.2f ms each) | draft %lld forwards, %.1f ms | "
                "library overhead %.1f us/round (%.1f%% of a target forward)\n",
                static_cast<long long>(st.target_forwards), 1e3 * st.target_model_seconds,
                1e3 * st.target_forward_seconds(), static_cast<long long>(st.draft_forwards),
                1e3 * st.draft_model_seconds, 1e6 * st.overhead_per_round_seconds(),
                st.target_forward_seconds() > 0 ? 100.0 * st.overhead_per_round_seconds() / st.target_forward_seconds()
                                                : 0.0);
  if (st.draft_layer_seconds > 0 && a.num_rounds > 0) {
    const double r = static_cast<double>(a.num_rounds);
    std::printf("  draft head per round: layer %.3f ms | LM head %.3f ms | sampling / tree building %.3f ms\n",
                1e3 * st.draft_layer_seconds / r, 1e3 * st.draft_head_seconds / r, 1e3 * st.draft_other_seconds() / r);
  }
  if (st.lag.rounds > 0) {
    const auto& l = st.lag;
    const double r = static_cast<double>(l.rounds);
    std::printf("  lag: tails %lld nodes, %lld accepted | whole tails %lld, a drafted sequence chosen %lld, stale %lld "
                "| %.2f sequences per tip\n",
                static_cast<long long>(l.tail_nodes), static_cast<long long>(l.tail_accepted),
                static_cast<long long>(l.tips), static_cast<long long>(l.chosen), static_cast<long long>(l.stale),
                l.tips > 0 ? double(l.sequences_drafted) / double(l.tips) : 0.0);
    std::printf("  per round: target forward %.3f ms | draft %.3f ms | target waited %.3f ms | draft idle %.3f ms\n",
                1e3 * l.score_seconds / r, 1e3 * l.draft_seconds / r, 1e3 * l.target_wait_seconds / r,
                1e3 * l.draft_idle_seconds / r);
  }
  if (st.resampling.trees > 0)
    std::printf("  re-sampling: %lld trees, %lld nodes verified, %lld tokens accepted from them, %lld separate "
                "target forwards\n",
                static_cast<long long>(st.resampling.trees), static_cast<long long>(st.resampling.nodes),
                static_cast<long long>(st.resampling.accepted),
                static_cast<long long>(st.resampling.separate_forwards));
}

void print_contention_note(const torch_backend::ContentionStats& c) {
  if (c.contended == 0) return;
  std::printf(
      "note: other work took the cores: %lld stall%s on preempted helper threads (%.1f ms); %.0f%% of the threaded "
      "steps ran on one thread, so speeds here are below this machine's quiet speed (docs/integration.md, "
      "\"Threads\")\n",
      static_cast<long long>(c.stalls), c.stalls == 1 ? "" : "s", 1e3 * c.stall_seconds, 100.0 * c.solo_fraction());
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
