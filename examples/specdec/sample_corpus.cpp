// `specdec sample-corpus`: text sampled from a model, written as a corpus in
// scripts/corpus/'s format, so that a draft with another tokenizer can learn
// the target's own distribution. The target gives no next-token distribution
// over another vocabulary's pieces to distil from; its texts re-tokenized
// can be trained on, which is sequence-level distillation (Kim and Rush,
// arXiv 1606.07947, §3.2, there with the teacher's beam output; sampled at
// T = 1, the texts are draws from the target's own law).
//
// Sample i is a prompt of --prompt-tokens cut from --tokens at an offset drawn
// from (seed, i), then up to --new-tokens drawn at the request's sampling
// under request id i: the same sample whatever the batch, the chunking, or a
// resume. Every --chunk samples are appended to the output and flushed, and
// `<out>.progress` records the samples and bytes saved; a rerun of the same
// command cuts off what a kill left past them and goes on. The progress file
// goes when the corpus is complete.
#include "sample_corpus.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "interrupt.hpp"
#include "session.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/io/file_io.hpp"
#include "specdec/io/token_file.hpp"
#include "specdec/torch/methods.hpp"

namespace specdec::cli {
namespace {

constexpr std::string_view kDocPrefix = "<|doc|> ";
// Philox stream of the prompts' offsets: requests use streams 4i+1 and 4i+2
// (GenerationOptions), so 4i+3 is free.
std::uint64_t prompt_stream(std::int64_t sample) {
  return static_cast<std::uint64_t>(sample) << 2 | 3;
}

// The ids of `path`, each checked against the model's vocabulary.
std::vector<TokenId> read_prompt_tokens(const std::filesystem::path& path, std::int64_t vocab) {
  const auto raw = io::read_token_file(path);
  std::vector<TokenId> tokens(raw.begin(), raw.end());
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] >= vocab)
      throw ModelLoadError(fmt::format("{}: token {} at position {} is outside the model's vocabulary of {}",
                                       path.string(), tokens[i], i, vocab));
  return tokens;
}

// Sample i's prompt: `len` tokens at a drawn offset, begun after the last end
// of document in them (a prompt spans no document boundary); an offset that
// leaves fewer than half of them is drawn again (64 times at most).
std::vector<TokenId> prompt_of(std::int64_t sample, std::uint64_t seed, const std::vector<TokenId>& tokens,
                               std::int64_t len, TokenId eos) {
  const auto span = static_cast<std::int64_t>(tokens.size()) - len + 1;
  for (std::uint64_t draw = 0;; ++draw) {
    const auto start =
        std::min(span - 1, static_cast<std::int64_t>(philox_uniform(seed, prompt_stream(sample), draw) *
                                                     static_cast<double>(span)));
    const auto first = tokens.begin() + start, last = first + len;
    const auto end_of_doc =
        std::find(std::make_reverse_iterator(last), std::make_reverse_iterator(first), eos);
    if (2 * (last - end_of_doc.base()) >= len) return {end_of_doc.base(), last};
    if (draw == 64) return {first, last};  // a text of short documents: the window as it is
  }
}

// One document of the corpus format: a header line, then the text; a blank
// line ends it. A text line that would read as a header loses its marker.
std::string document(std::int64_t sample, std::string_view text) {
  std::string doc = fmt::format("{}specdec-sample {}\n", kDocPrefix, sample);
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const auto eol = std::min(text.find('\n', pos), text.size());
    auto line = text.substr(pos, eol - pos);
    if (line.starts_with(kDocPrefix)) line.remove_prefix(kDocPrefix.size());
    doc.append(line).push_back('\n');
    pos = eol + 1;
  }
  doc.push_back('\n');
  return doc;
}

// The documents in a corpus text.
std::int64_t documents_in(const std::string& corpus) {
  std::int64_t n = 0;
  for (std::size_t pos = 0; pos < corpus.size();) {
    if (std::string_view(corpus).substr(pos).starts_with(kDocPrefix)) ++n;
    const auto eol = corpus.find('\n', pos);
    if (eol == std::string::npos) break;
    pos = eol + 1;
  }
  return n;
}

// What of the output is saved: its first `bytes` hold `samples` documents.
// Appending chunks, not rewriting the corpus at each (quadratic in its
// size), needs this record: a kill mid-append leaves part of a chunk.
struct Progress {
  std::int64_t samples = 0;
  std::uint64_t bytes = 0;
};

std::filesystem::path progress_path(const std::filesystem::path& out) {
  return out.string() + ".progress";
}

void save_progress(const std::filesystem::path& out, const Progress& p) {
  io::write_text_atomically(progress_path(out), fmt::format("samples {} bytes {}\n", p.samples, p.bytes));
}

// Where a rerun goes on. A corpus without a progress file is complete (a
// finished run's); one with it is cut back to the bytes it records.
Progress saved_part(const std::filesystem::path& out) {
  const auto progress = progress_path(out);
  if (!std::filesystem::exists(out)) return {};
  if (!std::filesystem::exists(progress)) {
    const auto corpus = io::read_text_file(out);
    return {documents_in(corpus), corpus.size()};
  }
  Progress p;
  long long samples = -1;
  unsigned long long bytes = 0;
  const auto text = io::read_text_file(progress);
  if (std::sscanf(text.c_str(), "samples %lld bytes %llu", &samples, &bytes) != 2 || samples < 0)
    throw InvalidArgumentError(
        fmt::format("sample-corpus: {} is not a progress record ('samples N bytes B')", progress.string()));
  p.samples = samples;
  p.bytes = bytes;
  const auto size = std::filesystem::file_size(out);
  if (size < p.bytes)
    throw InvalidArgumentError(
        fmt::format("sample-corpus: {} has {} bytes, fewer than the {} that {} records for its {} samples: "
                    "it changed since; remove both files to start again",
                    out.string(), size, p.bytes, progress.string(), p.samples));
  if (size > p.bytes) {
    std::filesystem::resize_file(out, p.bytes);
    std::printf("%s: cut %llu bytes of an unfinished chunk\n", out.string().c_str(),
                static_cast<unsigned long long>(size - p.bytes));
  }
  if (const auto found = documents_in(io::read_text_file(out)); found != p.samples)
    throw InvalidArgumentError(fmt::format(
        "sample-corpus: {} holds {} samples where {} records {}: remove both files to start again",
        out.string(), found, progress.string(), p.samples));
  return p;
}

}  // namespace

void add_sample_corpus_options(CLI::App& cmd, SampleCorpusCommand& c) {
  cmd.add_option("--model", c.model, "the model to sample from (config.json, model.safetensors)")
      ->check(CLI::ExistingDirectory)
      ->capture_default_str();
  cmd.add_option("--tokenizer", c.tokenizer, "its tokenizer (default: beside --model)");
  cmd.add_option("--tokens", c.tokens, "uint16 token file (the model's vocabulary) the prompts are cut from")
      ->required()
      ->check(CLI::ExistingFile);
  cmd.add_option("--out", c.out, "the corpus text to write (scripts/corpus/ format); a rerun goes on")
      ->required();
  cmd.add_option("--samples", c.samples, "samples in the corpus")->capture_default_str();
  cmd.add_option("--prompt-tokens", c.prompt_tokens, "tokens of each prompt")->capture_default_str();
  cmd.add_option("--new-tokens", c.new_tokens, "tokens sampled after each prompt (fewer at an EOS)")
      ->capture_default_str();
  cmd.add_option("--batch", c.batch, "requests decoded at once")->capture_default_str();
  cmd.add_option("--chunk", c.chunk, "samples between saves of --out (and between looks for a Ctrl-C)")
      ->capture_default_str();
  add_sampling_options(cmd, c.sampling);
  cmd.add_option("--threads", c.threads, "CPU threads (0 = all cores)");
  add_dtype_option(cmd, c.dtype);
}

int run_sample_corpus(const SampleCorpusCommand& c) {
  for (const auto& [name, value] : {std::pair{"--samples", c.samples},
                                    {"--prompt-tokens", c.prompt_tokens},
                                    {"--new-tokens", c.new_tokens},
                                    {"--batch", c.batch},
                                    {"--chunk", c.chunk}})
    if (value < 1)
      throw InvalidArgumentError(fmt::format("sample-corpus: {} {} (must be >= 1)", name, value));
  check_writable(c.out);
  catch_interrupt();
  auto s = load_session(c.model, {}, c.tokenizer, c.threads, c.dtype);
  const auto tokens = read_prompt_tokens(c.tokens, s.target.config().vocab_size);
  if (static_cast<std::int64_t>(tokens.size()) < c.prompt_tokens)
    throw InvalidArgumentError(fmt::format("sample-corpus: {} holds {} tokens, fewer than --prompt-tokens {}",
                                           c.tokens.string(), tokens.size(), c.prompt_tokens));
  Progress saved = saved_part(c.out);
  std::int64_t done = saved.samples;
  if (done > c.samples)
    throw InvalidArgumentError(
        fmt::format("sample-corpus: {} already holds {} samples, more than --samples {}", c.out.string(),
                    done, c.samples));
  if (done > 0)
    std::printf("%s holds %lld samples: going on from there\n", c.out.string().c_str(),
                static_cast<long long>(done));
  if (done < c.samples) save_progress(c.out, saved);  // before the first append
  auto method = torch_backend::make_method(torch_backend::parse_method("autoregressive"), s.target, nullptr,
                                           c.sampling);
  const auto start = std::chrono::steady_clock::now();
  std::int64_t new_tokens = 0;
  while (done < c.samples && !interrupted()) {
    const auto n = std::min(c.chunk, c.samples - done);
    std::vector<std::vector<TokenId>> prompts;
    std::vector<GenerationOptions> options;
    for (std::int64_t i = done; i < done + n; ++i) {
      prompts.push_back(prompt_of(i, c.sampling.seed, tokens, c.prompt_tokens, s.tokenizer.eos_id()));
      auto& o = options.emplace_back();
      o.max_new_tokens = c.new_tokens;
      o.stop_tokens = {s.tokenizer.eos_id()};
      o.sampling = c.sampling;
      o.request_id = static_cast<std::uint64_t>(i);  // the sample's own random streams
    }
    const auto run = method.generate_batch(prompts, options, static_cast<std::size_t>(c.batch));
    std::string chunk;
    for (std::int64_t k = 0; k < n; ++k) {
      auto ids = prompts[static_cast<std::size_t>(k)];
      const auto& out = run.results[static_cast<std::size_t>(k)].tokens;
      ids.insert(ids.end(), out.begin(), out.end());
      chunk += document(done + k, s.tokenizer.decode(ids));
    }
    new_tokens += run.new_tokens();
    io::append_text(c.out, chunk, /*sync=*/true);
    done += n;
    saved = {done, saved.bytes + chunk.size()};
    save_progress(c.out, saved);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%lld / %lld samples | %.0f new tokens/s this run | %.0f s\n", static_cast<long long>(done),
                static_cast<long long>(c.samples), static_cast<double>(new_tokens) / seconds, seconds);
    std::fflush(stdout);
  }
  if (done < c.samples) {
    std::printf("interrupted after %lld samples (saved); run the same command again to go on\n",
                static_cast<long long>(done));
    return kInterruptedExit;
  }
  std::filesystem::remove(progress_path(c.out));
  std::printf("%s: %lld samples\n", c.out.string().c_str(), static_cast<long long>(done));
  return 0;
}

}  // namespace specdec::cli
