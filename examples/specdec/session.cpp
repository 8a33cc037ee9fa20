#include "session.hpp"

#include <ATen/Parallel.h>

#include <cstdio>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/cpu/threads.hpp"

namespace specdec::cli {

Session load_session(const std::filesystem::path& target, const std::filesystem::path& draft,
                     const std::filesystem::path& tokenizer, int threads, const std::string& dtype) {
  // Forwards run on specdec's own threads (threads.hpp); ATen's count is for
  // the few ATen operations around them.
  cpu::set_default_forward_threads(threads);
  if (threads > 0) at::set_num_threads(threads);
  const auto precision = torch_backend::choose_inference_dtype(dtype);
  if (!precision.note.empty()) std::fprintf(stderr, "specdec: %s\n", precision.note.c_str());
  const auto tok_path = tokenizer_path(target, tokenizer);
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

void print_contention_note(const cpu::ContentionStats& c) {
  if (c.contended == 0) return;
  std::printf(
      "note: other work took the cores: %lld stall%s on preempted helper threads (%.1f ms); %.0f%% of the threaded "
      "steps ran on one thread, so speeds here are below this machine's quiet speed (docs/integration.md, "
      "\"Threads\")\n",
      static_cast<long long>(c.stalls), c.stalls == 1 ? "" : "s", 1e3 * c.stall_seconds, 100.0 * c.solo_fraction());
}

}  // namespace specdec::cli
