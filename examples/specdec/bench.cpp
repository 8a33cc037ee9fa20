// `specdec bench`: prompt sets x methods on one target/draft pair. For every
// prompt, autoregressive decoding runs right before the methods (same process,
// same prompt, interleaved so drift in machine speed hits all alike). Prints a
// table and writes JSON: one record per (method, prompt set) with tokens/s,
// the autoregressive tokens/s of the same run, speedup (ratio of totals, and
// the median of per-prompt ratios), tau, per-depth acceptance, time to first
// token, overhead; greedy runs also count outputs that differ from
// autoregressive decoding (numerical near-ties between batched and one-token
// forwards are the only legitimate cause).
#include "bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "../../bench/methods_grid.hpp"  // the batched grid's workloads
#include "interrupt.hpp"
#include "session.hpp"
#include "soak.hpp"
#include "specdec/accept/same_drafts_comparison.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/logit_rows.hpp"
#include "specdec/cpu/threads.hpp"
#include "specdec/io/file_io.hpp"
#include "specdec/policy/throughput_model.hpp"
#include "specdec/torch/methods.hpp"
#include "specdec/torch/spire_draft.hpp"

namespace specdec::cli {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The end of a --check run: every greedy output that differs from
// autoregressive decoding, and the exit status.
int finish_check(const BenchCommand& b, const std::vector<std::string>& mismatches, std::size_t outputs) {
  if (!b.check) return 0;
  for (const auto& m : mismatches) std::printf("check: differs from autoregressive: %s\n", m.c_str());
  std::printf("check %s: %zu of %zu greedy outputs differ from autoregressive decoding\n",
              mismatches.empty() ? "passed" : "FAILED", mismatches.size(), outputs);
  return mismatches.empty() ? 0 : 1;
}

// Where two token sequences first differ (the shorter one's length if one
// is a prefix of the other).
std::size_t first_mismatch(const std::vector<TokenId>& a, const std::vector<TokenId>& b) {
  std::size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

struct Tally {
  Stats total;  // summed over prompts (acceptance merged)
  std::vector<double> speedups, ttft_ms, prefill_ms;
  std::int64_t differ = 0;
  std::map<std::string, std::int64_t> stop_reasons;  // why each generation ended
  cpu::ContentionStats contention;                   // what other work on the cores cost

  void add(const Stats& s) {
    auto& a = total.acceptance;
    const auto& b = s.acceptance;
    a.lossless = a.lossless && b.lossless;
    a.num_rounds += b.num_rounds;
    a.num_emitted += b.num_emitted;
    a.num_accepted += b.num_accepted;
    a.num_zero_accept += b.num_zero_accept;
    if (a.depth_tried.size() < b.depth_tried.size()) {
      a.depth_tried.resize(b.depth_tried.size(), 0);
      a.depth_accepted.resize(b.depth_tried.size(), 0);
    }
    for (std::size_t d = 0; d < b.depth_tried.size(); ++d) {
      a.depth_tried[d] += b.depth_tried[d];
      a.depth_accepted[d] += b.depth_accepted[d];
    }
    total.new_tokens += s.new_tokens;
    total.total_seconds += s.total_seconds;
    total.prefill_seconds += s.prefill_seconds;
    total.draft_seconds += s.draft_seconds;
    total.verify_seconds += s.verify_seconds;
    total.accept_seconds += s.accept_seconds;
    total.target_model_seconds += s.target_model_seconds;
    total.step_host_seconds += s.step_host_seconds;
    total.shared_steps += s.shared_steps;
    total.draft_model_seconds += s.draft_model_seconds;
    total.target_forwards += s.target_forwards;
    total.draft_forwards += s.draft_forwards;
    total.draft_layer_seconds += s.draft_layer_seconds;
    total.draft_head_seconds += s.draft_head_seconds;
    total.draft_commit_seconds += s.draft_commit_seconds;
    total.resampling.trees += s.resampling.trees;
    total.resampling.nodes += s.resampling.nodes;
    total.resampling.accepted += s.resampling.accepted;
    total.resampling.separate_forwards += s.resampling.separate_forwards;
    total.lag += s.lag;
    total.verified += s.verified;
    ttft_ms.push_back(1e3 * s.time_to_first_token_seconds);
    prefill_ms.push_back(1e3 * s.prefill_seconds);
    ++stop_reasons[to_string(s.stop_reason)];
  }
};

// DuoDecoding's lag counters and per-round profile (Stats::Lag); null for
// methods without a lagged carry-over.
nlohmann::json lag_json(const Stats::Lag& l) {
  if (l.rounds == 0) return nullptr;
  const double r = static_cast<double>(l.rounds);
  return {{"rounds", l.rounds},
          {"tail_nodes", l.tail_nodes},
          {"tail_accepted", l.tail_accepted},
          {"tips", l.tips},
          {"sequences_drafted", l.sequences_drafted},
          {"chosen", l.chosen},
          {"stale", l.stale},
          {"top1_confusion", {{l.top1_confusion[0][0], l.top1_confusion[0][1]},
                              {l.top1_confusion[1][0], l.top1_confusion[1][1]}}},
          {"target_forward_ms_per_round", 1e3 * l.score_seconds / r},
          {"draft_ms_per_round", 1e3 * l.draft_seconds / r},
          {"target_wait_ms_per_round", 1e3 * l.target_wait_seconds / r},
          {"draft_idle_ms_per_round", 1e3 * l.draft_idle_seconds / r}};
}

void progress(std::size_t done, std::size_t total, const std::string& what) {
  const int width = 30;
  const auto filled = static_cast<int>(width * done / std::max<std::size_t>(total, 1));
  std::fprintf(stderr, "\r[%s%s] %zu/%zu %-40s", std::string(static_cast<std::size_t>(filled), '#').c_str(),
               std::string(static_cast<std::size_t>(width - filled), ' ').c_str(), done, total, what.c_str());
  std::fflush(stderr);
}


// What other work on the cores cost a method (threads.hpp): its forwards'
// threaded steps, those run on one thread after contention, the stalls on
// preempted helpers, and the 50 ms windows that lost over 20% to stalls and
// to waiting for a core (each sent the team to one thread).
nlohmann::json contention_json(const cpu::ContentionStats& c) {
  return {{"threaded_steps", c.jobs},
          {"single_thread_steps", c.solo_jobs},
          {"single_thread_fraction", c.solo_fraction()},
          {"stalls", c.stalls},
          {"stall_ms", 1e3 * c.stall_seconds},
          {"contended_windows", c.contended}};
}

// The fields every record has: what ran, how fast against autoregressive
// decoding in the same run, and how much was accepted.
nlohmann::json base_record(const std::string& method, const BenchCommand& b, const Stats& st, double tps,
                           double ar_tps, DType dtype) {
  return {{"method", method},
          {"dtype", torch_backend::inference_dtype_name(dtype)},
          {"max_new_tokens", b.max_new_tokens},
          {"temperature", b.sampling.temperature},
          {"lossless", st.acceptance.lossless},
          {"tokens_per_second", tps},
          {"autoregressive_tokens_per_second", ar_tps},
          {"speedup", tps / ar_tps},
          {"tau", st.acceptance.mean_emitted()},
          {"acceptance_rate", st.acceptance.acceptance_rate()},
          {"rounds", st.acceptance.num_rounds}};
}

void write_records(const std::filesystem::path& path, const nlohmann::json& records) {
  if (path.empty()) return;
  write_text_file(path, records.dump(2) + "\n");
  std::printf("wrote %s\n", path.string().c_str());
}

// Fractions of rounds that verified 0, 1, ... drafted tokens.
std::vector<double> fractions(const std::vector<std::int64_t>& counts) {
  std::int64_t total = 0;
  for (const auto c : counts) total += c;
  std::vector<double> out;
  for (const auto c : counts) out.push_back(total ? double(c) / double(total) : 0.0);
  return out;
}

double verified_per_round(const Stats& s) {
  return s.rounds() ? double(s.verified.verified_nodes) / double(s.rounds()) : 0.0;
}

// Bytes per weight of a model's inference copy.
double weight_bytes(const torch_backend::LlamaModel& m) { return m.inference_dtype() == DType::kBF16 ? 2.0 : 4.0; }

// The machine's rates as the target's own forward sees them (SPIRe §2's
// bandwidth and FLOP rate): bytes/s from one-token steps, which read every
// weight and little else, FLOP/s from 256-token forwards, which are bound by
// their matmuls. Medians of 7 after a warm-up.
HardwareRates measure_rates(torch_backend::LlamaModel& target, const ForwardCost& cost) {
  constexpr std::int32_t kSeq = 1 << 30;  // no request's
  const auto median_seconds = [&](std::int64_t tokens) {
    std::vector<TokenId> ids(static_cast<std::size_t>(tokens));
    std::vector<std::int64_t> positions(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<TokenId>(3 + i % 97);
      positions[i] = static_cast<std::int64_t>(i);
    }
    HostRows rows;
    std::vector<double> seconds;
    for (int rep = 0; rep < 8; ++rep) {
      target.open(kSeq);
      const SequenceInput in{kSeq, ids, positions};
      ForwardRequest request{std::span(&in, 1)};
      request.logits = rows.view(tokens, target.vocab_size());
      const auto start = std::chrono::steady_clock::now();
      target.forward(request);
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      if (rep > 0) seconds.push_back(took.count());
      target.close(kSeq);
    }
    std::nth_element(seconds.begin(), seconds.begin() + 3, seconds.end());
    return seconds[3];
  };
  const double step = median_seconds(1), wide = median_seconds(256);
  // 256 causal rows attend to 128.5 keys on average.
  return {cost.weight_bytes / step,
          256.0 * (cost.matmul_flops_per_token + 128.5 * cost.attention_flops_per_key) / wide};
}

// The forward's costs as MeasuredForwardCost takes them: r one-token
// sequences with nothing cached, for the row counts a step and a
// verification of up to 64 sequences x 5 tokens run (small sink + window
// caches, so that 320 sequences take little memory), medians of 5; and
// attention's seconds per sequence and key of a one-token step, from 16
// sequences at 16 and at 784 cached tokens (its kernel attends up to 4
// queries of a kv head per read of the keys: decoder_layer.cpp).
MeasuredForwardCost measure_forward(torch_backend::LlamaModel& m) {
  constexpr std::int32_t kFirstSeq = 1 << 29;  // no request's
  HostRows rows_out;
  const auto median_of_5 = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + 2, v.end());
    return v[2];
  };
  // n sequences of `tokens` new tokens each (a causal chain) at `position`.
  const auto timed_step = [&](std::int32_t n, std::int64_t position, std::int64_t tokens = 1) {
    const std::vector<TokenId> token(static_cast<std::size_t>(tokens), 5);
    std::vector<std::int64_t> at(token.size());
    for (std::size_t i = 0; i < at.size(); ++i) at[i] = position + static_cast<std::int64_t>(i);
    std::vector<SequenceInput> inputs;
    for (std::int32_t s = 0; s < n; ++s) inputs.push_back({kFirstSeq + s, token, at});
    ForwardRequest request{inputs};
    request.logits = rows_out.view(n * tokens, m.vocab_size());
    const auto start = std::chrono::steady_clock::now();
    m.forward(request);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    return took.count();
  };
  const std::vector<std::int64_t> counts{1, 2, 4, 8, 16, 32, 64, 128, 192, 256, 320};
  std::vector<double> seconds;
  for (const auto r : counts) {
    const auto n = static_cast<std::int32_t>(r);
    std::vector<double> reps;
    for (int rep = 0; rep < 6; ++rep) {
      for (std::int32_t s = 0; s < n; ++s) m.open(kFirstSeq + s, CachePolicy::sink_window(0, 1));
      const double t = timed_step(n, 0);
      if (rep > 0) reps.push_back(t);
      for (std::int32_t s = 0; s < n; ++s) m.close(kFirstSeq + s);
    }
    seconds.push_back(median_of_5(reps));
  }
  // Attention per key: the same 16-sequence step at two contexts, of one
  // token and of a 5-token chain (a k = 4 verification).
  constexpr std::int32_t kSeqs = 16;
  const auto at_context = [&](std::int64_t context, std::int64_t tokens) {
    std::vector<TokenId> prefix(static_cast<std::size_t>(context));
    std::vector<std::int64_t> positions(prefix.size());
    std::vector<std::int32_t> all(prefix.size());
    for (std::size_t i = 0; i < prefix.size(); ++i) {
      prefix[i] = static_cast<TokenId>(3 + (i * 37) % 97);
      positions[i] = static_cast<std::int64_t>(i);
      all[i] = static_cast<std::int32_t>(i);
    }
    for (std::int32_t s = 0; s < kSeqs; ++s) {
      m.open(kFirstSeq + s);
      const SequenceInput in{kFirstSeq + s, prefix, positions};
      m.forward(ForwardRequest{std::span(&in, 1)});
      m.accept(kFirstSeq + s, all);
    }
    std::vector<double> reps;
    for (int rep = 0; rep < 6; ++rep) {
      const double t = timed_step(kSeqs, context, tokens);
      if (rep > 0) reps.push_back(t);
      for (std::int32_t s = 0; s < kSeqs; ++s) m.rollback(kFirstSeq + s, context);
    }
    for (std::int32_t s = 0; s < kSeqs; ++s) m.close(kFirstSeq + s);
    return median_of_5(reps);
  };
  const auto per_key = [&](std::int64_t tokens) {
    return std::max(0.0, (at_context(784, tokens) - at_context(16, tokens)) / (kSeqs * 768.0));
  };
  const auto& c = m.config();
  const auto heads_per_kv = c.num_attention_heads / c.num_key_value_heads;
  const double one = per_key(1);
  // A 5-token chain reads each kv head's keys ceil(5 heads_per_kv / 4)
  // times; what the reads after the first cost, against the first.
  const MeasuredForwardCost uncached(counts, seconds, one, heads_per_kv, 4);
  const double later = uncached.read_cost(5) > 1.0 && one > 0.0
                           ? std::max(0.0, (per_key(5) / one - 1.0) / (uncached.read_cost(5) - 1.0))
                           : 1.0;
  return MeasuredForwardCost(counts, seconds, one, heads_per_kv, 4, later);
}

// A SPIRe draft's step as MeasuredForwardCost takes it: r one-token steps
// with a full sink + window of memories (its attention is in the step's
// time; it does not grow with the context), medians of 5.
MeasuredForwardCost measure_spire(torch_backend::SpireDraft& d) {
  constexpr std::int32_t kFirstSeq = 1 << 29;
  const auto& c = d.config();
  const auto held = c.window == 0 ? std::int64_t{768} : c.sink + c.window;
  const std::vector<float> rows(static_cast<std::size_t>(held * d.memory_layers() * d.hidden_size()), 0.5f);
  const std::vector<std::int64_t> counts{1, 2, 4, 8, 16, 32, 64, 128, 192, 256, 320};
  std::vector<double> seconds;
  std::vector<float> logits;
  for (const auto r : counts) {
    std::vector<std::int32_t> seqs(static_cast<std::size_t>(r));
    for (std::int32_t i = 0; i < static_cast<std::int32_t>(r); ++i) {
      seqs[static_cast<std::size_t>(i)] = kFirstSeq + i;
      d.open(kFirstSeq + i);
      d.remember(kFirstSeq + i, rows, held);
    }
    const std::vector<TokenId> tokens(seqs.size(), 5);
    const std::vector<std::int64_t> at(seqs.size(), held);
    logits.resize(seqs.size() * static_cast<std::size_t>(d.vocab_size()));
    std::vector<double> reps;
    for (int rep = 0; rep < 6; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      d.step(seqs, tokens, at, logits);
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      if (rep > 0) reps.push_back(took.count());
      for (const auto q : seqs) d.remember(q, {}, 0);  // drops the staged step
    }
    for (const auto q : seqs) d.close(q);
    std::nth_element(reps.begin(), reps.begin() + 2, reps.end());
    seconds.push_back(reps[2]);
  }
  return MeasuredForwardCost(counts, seconds, 0.0);
}

// What the performance model needs of a method: its draft's cost and k; none
// for the methods it does not cover (trees, heads, autoregressive decoding).
std::optional<std::pair<DraftCost, std::int32_t>> modelled_draft(const MethodConfig& config,
                                                                 const ForwardCost& target,
                                                                 const torch_backend::LlamaModel* draft,
                                                                 const torch_backend::SpireDraft* spire) {
  if (config.name == "spire" && spire != nullptr && config.text("policy") == "fixed") {
    auto c = spire->config().target;  // the target's shapes, the draft's layers, its window of memories
    c.num_hidden_layers = spire->config().layers;
    const auto keys = spire->config().window == 0 ? 0 : spire->config().sink + spire->config().window + config.int32("k");
    return std::pair{DraftCost{ForwardCost::of_llama(c, spire->inference_dtype() == DType::kBF16 ? 2.0 : 4.0, 4.0),
                               keys},
                     config.int32("k")};
  }
  if (config.name == "chain" && draft != nullptr && config.text("policy") == "fixed")
    return std::pair{DraftCost{ForwardCost::of_llama(draft->config(), weight_bytes(*draft), 4.0), 0},
                     config.int32("k")};
  if (config.name == "magicdec" && config.text("policy") == "fixed")  // its window holds committed tokens; +k staged
    return std::pair{DraftCost{target, config.int32("sink") + config.int32("window") + config.int32("k")},
                     config.int32("k")};
  return std::nullopt;
}

// --context: a function (prompt, context L, request i) -> the prompt filled
// from the front with held-out text to L - max_new_tokens tokens
// (io::fill_to_context). L = 0 leaves prompts as they are.
std::function<std::vector<TokenId>(const std::vector<TokenId>&, std::int64_t, std::size_t)> context_filler(
    const BenchCommand& b, const tokenizer::Tokenizer& tokenizer) {
  std::vector<TokenId> text;
  if (!b.contexts.empty()) {
    for (const auto l : b.contexts)
      if (l <= b.max_new_tokens)
        throw InvalidArgumentError(
            fmt::format("bench: --context {} leaves no prompt before {} new tokens", l, b.max_new_tokens));
    text = tokenizer.encode(io::read_text_file(b.context_text));
  }
  return [&b, text = std::move(text), bos = tokenizer.bos_id()](const std::vector<TokenId>& prompt,
                                                                std::int64_t context, std::size_t i) {
    if (context == 0) return prompt;
    return io::fill_to_context(prompt, text, bos, context, b.max_new_tokens, i,
                               "bench: " + b.context_text.string());
  };
}

// The batched bench: one workload, every method at every batch size, AR first.
int run_batched_bench(const BenchCommand& b) {
  check_writable(b.json);
  catch_interrupt();  // Ctrl-C: the runs that finished are reported and written, marked interrupted
  if (b.same_drafts)
    throw InvalidArgumentError("bench: --same-drafts compares rules prompt by prompt; it does not combine with --batch");
  if (b.dtypes.size() > 1)
    throw InvalidArgumentError("bench: --batch runs one precision; give --dtype once (or run once per precision)");
  auto s = load_session(b.target, b.draft, b.tokenizer, b.threads, b.dtypes.empty() ? "auto" : b.dtypes.front());
  auto* draft = s.draft ? &*s.draft : nullptr;
  // SPIRe's performance model (policy/throughput_model.hpp), on this
  // machine's rates, beside each measurement it covers.
  const auto target_cost = ForwardCost::of_llama(s.target.config(), weight_bytes(s.target), 4.0);
  const auto rates = measure_rates(s.target, target_cost);
  std::printf("performance model: %.1f GB/s, %.1f GFLOP/s (the target's one-token and 256-token forwards)\n",
              rates.bytes_per_second / 1e9, rates.flops_per_second / 1e9);
  // ... and the measured costs, for the model with the terms SPIRe's leaves out.
  const auto target_measured = measure_forward(s.target);
  const auto draft_measured = draft != nullptr ? std::optional(measure_forward(*draft)) : std::nullopt;
  // A SPIRe draft (spire= of the methods, else models/spire), for the model.
  std::optional<torch_backend::SpireDraft> spire;
  std::optional<MeasuredForwardCost> spire_measured;
  for (const auto& spec : b.methods) {
    const auto config = torch_backend::parse_method(spec);
    if (config.name != "spire" || spire) continue;
    const auto& head = config.text("head");
    spire.emplace(torch_backend::SpireDraft::load(head.empty() ? b.target.parent_path() / "spire" : std::filesystem::path(head), s.target));
    spire->set_inference_dtype(s.target.inference_dtype());
    spire_measured = measure_spire(*spire);
    std::printf("measured: SPIRe draft step %.2f ms (1 row), %.2f ms (64 rows)\n", 1e3 * spire_measured->weights_seconds(1),
                1e3 * spire_measured->weights_seconds(64));
  }
  std::printf(
      "measured: target step %.2f ms (1 row), %.2f ms (64 rows), %.2f ms (320 rows); attention %.3f us per "
      "sequence and key, a later read of the keys %.2f of the first\n",
      1e3 * target_measured.weights_seconds(1), 1e3 * target_measured.weights_seconds(64),
      1e3 * target_measured.weights_seconds(320), 1e6 * target_measured.attention_seconds_per_key(),
      target_measured.later_read());
  std::vector<AnyDecoder> methods;
  methods.push_back(torch_backend::make_method(torch_backend::parse_method("autoregressive"), s.target, nullptr,
                                               b.sampling));
  for (const auto& spec : b.methods)
    methods.push_back(torch_backend::make_method(torch_backend::parse_method(spec), s.target, draft, b.sampling,
                                                 b.target.parent_path()));
  std::vector<std::vector<TokenId>> prompts;
  std::vector<std::string> set_names;
  for (const auto& path : b.prompt_sets) {
    for (const auto& text : read_prompts(path, b.num_prompts)) prompts.push_back(s.tokenizer.encode(text, true));
    set_names.push_back(path.stem().string());
  }
  const auto fill = context_filler(b, s.tokenizer);
  // The workload of a batch size at a context (bench::cell_workload): the
  // pooled prompts, cycled to at least waves x batch requests (filled to the
  // context); request i has seed + i.
  auto workload_of = [&](std::int32_t batch, std::int64_t context) {
    return bench::cell_workload(prompts, fill, b.waves, batch, context, b.max_new_tokens, b.sampling);
  };
  const auto [first_prompts, options] = workload_of(1, 0);
  const auto largest = static_cast<std::size_t>(*std::max_element(b.batches.begin(), b.batches.end()));
  if (b.warmup > 0) {  // page in weights, create oneDNN primitives for the row counts a batch sees
    std::vector<GenerationOptions> short_options(options);
    for (auto& o : short_options) o.max_new_tokens = std::min<std::int64_t>(8, b.max_new_tokens);
    const auto n = std::min(prompts.size(), largest);
    for (std::size_t m = 0; m < methods.size(); ++m) {
      progress(m, methods.size(), "warm-up " + methods[m].name());
      methods[m].generate_batch(std::span(first_prompts).first(n), std::span(short_options).first(n), largest);
    }
    std::fprintf(stderr, "\n");
  }
  const std::string workload = fmt::format("{}", fmt::join(set_names, "+"));
  nlohmann::json records = nlohmann::json::array();
  std::vector<std::string> mismatches;  // --check: greedy outputs differing from autoregressive
  std::size_t outputs = 0;
  std::printf("%-44s %7s %5s %9s %9s %8s %8s %6s %7s %8s %8s %9s\n", "method", "context", "batch", "tok/s",
              "AR tok/s", "speedup", "decode", "tau", "occup.", "drafted", "verified", "worst-5");
  std::size_t done = 0;
  const auto contexts = b.contexts.empty() ? std::vector<std::int64_t>{0} : b.contexts;
  std::vector<std::pair<std::int64_t, std::int32_t>> cells;  // (context, batch), every batch at each context
  for (const auto context : contexts)
    for (const auto batch : b.batches) cells.emplace_back(context, batch);
  const std::size_t total_runs = cells.size() * methods.size();
  for (const auto& [context, batch] : cells) {
    if (interrupted()) break;
    const auto [batch_prompts, batch_options] = workload_of(batch, context);
    double ar_tps = 0.0, ar_decode_tps = 0.0;
    std::vector<std::vector<TokenId>> ar_tokens;
    for (std::size_t m = 0; m < methods.size() && !interrupted(); ++m) {
      progress(done++, total_runs, fmt::format("context {} batch {} {}", context, batch, methods[m].name()));
      const auto run = methods[m].generate_batch(batch_prompts, batch_options, static_cast<std::size_t>(batch));
      Tally t;
      std::vector<std::pair<double, std::size_t>> per_request;  // (verified per round, request)
      std::int64_t differ = 0;
      for (std::size_t i = 0; i < run.results.size(); ++i) {
        const auto& r = run.results[i];
        t.add(r.stats);
        per_request.emplace_back(verified_per_round(r.stats), i);
        if (m == 0) {
          ar_tokens.push_back(r.tokens);
          continue;
        }
        ++outputs;
        if (b.sampling.is_greedy() && r.tokens != ar_tokens[i]) {
          ++differ;
          mismatches.push_back(fmt::format("{} batch {} request {}: token {}", methods[m].name(), batch, i,
                                           first_mismatch(r.tokens, ar_tokens[i])));
        }
      }
      std::sort(per_request.begin(), per_request.end());
      Stats::Verified worst;
      std::int64_t worst_rounds = 0;
      const auto five = std::min<std::size_t>(5, per_request.size());
      for (std::size_t w = 0; w < five; ++w) {
        const auto& st = run.results[per_request[w].second].stats;
        worst += st.verified;
        worst_rounds += st.rounds();
      }
      const double tps = run.tokens_per_second();
      const double decode_tps = run.decode_tokens_per_second();
      if (m == 0) {
        ar_tps = tps;
        ar_decode_tps = decode_tps;
      }
      const auto& st = t.total;
      const double drafted = st.rounds() ? double(st.verified.drafted_nodes) / double(st.rounds()) : 0.0;
      const double verified = verified_per_round(st);
      const double worst_verified = worst_rounds ? double(worst.verified_nodes) / double(worst_rounds) : 0.0;
      // The model's multiplier at the measured tau, at the context halfway
      // through generation: SPIRe's, at a full batch, and the one to compare
      // with the measurement, at the batch the method's steps held on
      // average (speculative requests finish at different steps, so a
      // draining batch holds fewer than B while autoregressive decoding's
      // holds B): tau / Delta t(o) x (o / t_target(o)) / (B / t_target(B)).
      std::optional<ThroughputPrediction> predicted;
      double predicted_at_occupancy = 0.0, measured_model = 0.0, measured_model_uncached = 0.0;
      const auto modelled = m == 0 ? std::nullopt
                                   : modelled_draft(torch_backend::parse_method(b.methods[m - 1]), target_cost, draft,
                                                    spire ? &*spire : nullptr);
      if (modelled && st.acceptance.mean_emitted() >= 1.0) {
        const auto mean_context =
            (context > 0 ? context : static_cast<std::int64_t>(batch_prompts.front().size()) + b.max_new_tokens) -
            b.max_new_tokens / 2;
        const double tau = std::min(st.acceptance.mean_emitted(), modelled->second + 1.0);
        predicted = predict_throughput(target_cost, modelled->first, rates, batch, mean_context, modelled->second, tau);
        const auto held = std::max<std::int64_t>(1, std::llround(run.mean_batch));
        const auto at_held =
            predict_throughput(target_cost, modelled->first, rates, held, mean_context, modelled->second, tau);
        predicted_at_occupancy = at_held.multiplier * (static_cast<double>(held) / at_held.t_target) /
                                 (static_cast<double>(batch) / predicted->t_target);
        // With the measured costs; magicdec's draft is the target itself.
        const bool is_spire = torch_backend::parse_method(b.methods[m - 1]).name == "spire";
        const bool self = !is_spire && modelled->first.kv_limit > 0;
        if (self || is_spire || draft_measured) {
          const auto& d = is_spire ? *spire_measured : self ? target_measured : *draft_measured;
          const auto p = predict_throughput(target_measured, d, modelled->first.kv_limit, held, mean_context,
                                            modelled->second, tau);
          measured_model = p.multiplier * (static_cast<double>(held) / p.t_target) /
                           (static_cast<double>(batch) / target_measured.seconds(batch, 1, mean_context));
          // ... and as if every read of the keys came from memory (the model
          // before the later-read term), for the comparison.
          const auto uncached = target_measured.with_later_read(1.0);
          const auto q = predict_throughput(uncached, self ? uncached : d, modelled->first.kv_limit, held,
                                            mean_context, modelled->second, tau);
          measured_model_uncached = q.multiplier * (static_cast<double>(held) / q.t_target) /
                                    (static_cast<double>(batch) / uncached.seconds(batch, 1, mean_context));
        }
      }
      std::printf("\r%-44s %7lld %5d %9.1f %9.1f %7.2fx %7.2fx %6.2f %7.1f %8.2f %8.2f %9.2f%s%s\n",
                  methods[m].name().c_str(), static_cast<long long>(context), batch, tps, ar_tps, tps / ar_tps,
                  decode_tps / ar_decode_tps, st.acceptance.mean_emitted(), run.mean_batch, drafted, verified,
                  worst_verified, differ ? fmt::format("  ({} outputs differ)", differ).c_str() : "",
                  predicted ? fmt::format("  model {:.2f}x (SPIRe's {:.2f}x; {:.2f}x at a full batch)",
                                          measured_model, predicted_at_occupancy, predicted->multiplier)
                                  .c_str()
                            : "");
      auto record = base_record(methods[m].name(), b, st, tps, ar_tps, s.target.inference_dtype());
      record.update({{"batch", batch},
                         {"context", context},
                         {"workload", workload},
                         {"requests", batch_prompts.size()},
                         {"seconds", run.seconds},
                         {"prefill_seconds", run.prefill_seconds},
                         {"decode_tokens_per_second", decode_tps},
                         {"autoregressive_decode_tokens_per_second", ar_decode_tps},
                         {"decode_speedup", decode_tps / ar_decode_tps},
                         {"steps", run.steps},
                         {"mean_batch", run.mean_batch},
                         {"peak_batch", run.peak_batch},
                         {"tau", st.acceptance.mean_emitted()},
                         {"acceptance_rate", st.acceptance.acceptance_rate()},
                         {"drafted_per_round", drafted},
                         {"verified_per_round", verified},
                         {"verified_length_fractions", fractions(st.verified.rounds_by_nodes)},
                         {"worst5_verified_per_round", worst_verified},
                         {"worst5_verified_length_fractions", fractions(worst.rounds_by_nodes)},
                         {"median_verified_per_round_per_request", median([&] {
                            std::vector<double> v;
                            for (const auto& [x, i] : per_request) v.push_back(x);
                            return v;
                          }())},
                         {"target_forward_ms", 1e3 * st.target_forward_seconds()},
                         {"overhead_per_round_us", 1e6 * st.overhead_per_round_seconds()},
                         {"draft_seconds", st.draft_seconds},
                         {"verify_seconds", st.verify_seconds},
                         {"stop_reasons", t.stop_reasons},
                         {"outputs_differing_from_autoregressive", differ}});
      if (predicted)
        record["performance_model"] = {
            {"multiplier", predicted->multiplier},
            {"multiplier_at_occupancy", predicted_at_occupancy},
            {"measured_cost_multiplier", measured_model},
            {"measured_cost_multiplier_every_read_from_memory", measured_model_uncached},
            {"attention_seconds_per_key", target_measured.attention_seconds_per_key()},
            {"later_read", target_measured.later_read()},
            {"delta_t", predicted->delta_t},
            {"t_target_ms", 1e3 * predicted->t_target},
            {"t_draft_ms", 1e3 * predicted->t_draft},
            {"t_verify_ms", 1e3 * predicted->t_verify},
            {"bytes_per_second", rates.bytes_per_second},
            {"flops_per_second", rates.flops_per_second}};
      records.push_back(std::move(record));
    }
  }
  std::fprintf(stderr, "\n");
  if (interrupted()) {
    for (auto& r : records) r["interrupted"] = true;
    write_records(b.json, records);
    std::printf("[interrupted after %zu of %zu runs: the rows above are the runs that finished]\n", done, total_runs);
    return kInterruptedExit;
  }
  progress(total_runs, total_runs, "");
  std::fprintf(stderr, "\n");
  write_records(b.json, records);
  return finish_check(b, mismatches, outputs);
}

// Each method's prompts again, untimed, every round re-verified by the three
// rules on the same drafts. A method that does not expose its rounds gets
// none (every registered method does).
std::vector<std::optional<SameDraftsComparison>> compare_rules_on_same_drafts(std::vector<AnyDecoder>& methods,
                                                                             const std::vector<std::string>& prompts,
                                                                             const tokenizer::Tokenizer& tokenizer,
                                                                             const GenerationOptions& options,
                                                                             const std::string& set_name) {
  std::vector<std::optional<SameDraftsComparison>> out(methods.size());
  for (std::size_t m = 0; m < methods.size(); ++m) {
    auto& cmp = out[m].emplace(options.sampling.seed);
    try {
      methods[m].set_round_view_observer([&cmp](const RoundView& v) { cmp.observe(v); });
    } catch (const UnsupportedError&) {
      out[m].reset();
      continue;
    }
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      progress(i, prompts.size(), set_name + " same drafts " + methods[m].name());
      methods[m].generate(tokenizer.encode(prompts[i], true), options);
    }
    methods[m].set_round_view_observer({});
  }
  progress(1, 1, "");
  std::fprintf(stderr, "\n");
  return out;
}

nlohmann::json same_drafts_json(const SameDraftsComparison& c) {
  const auto block = c.block().rounds > 0 ? nlohmann::json(c.block().tau()) : nlohmann::json(nullptr);
  const auto token_chains =
      c.block().rounds > 0 ? nlohmann::json(c.token_level_on_chains().tau()) : nlohmann::json(nullptr);
  return {{"rounds", c.token_level().rounds},
          {"tau_token_level", c.token_level().tau()},
          {"tau_traversal", c.traversal().tau()},
          {"chain_rounds", c.block().rounds},
          {"tau_block", block},
          {"tau_token_level_on_chains", token_chains},
          {"one_hot_rounds", c.one_hot_exact().rounds},
          {"tau_exact_one_hot",
           c.one_hot_exact().rounds > 0 ? nlohmann::json(c.one_hot_exact().tau()) : nlohmann::json(nullptr)},
          {"traversal_minus_token_accepted", c.traversal_gain().mean()},
          {"traversal_minus_token_standard_error", c.traversal_gain().standard_error()},
          {"block_minus_token_accepted", c.block().rounds > 0 ? nlohmann::json(c.block_gain().mean()) : nlohmann::json(nullptr)},
          {"block_minus_token_standard_error",
           c.block().rounds > 0 ? nlohmann::json(c.block_gain().standard_error()) : nlohmann::json(nullptr)}};
}

void print_same_drafts(const std::vector<AnyDecoder>& methods,
                       const std::vector<std::optional<SameDraftsComparison>>& same, const std::string& set_name) {
  std::printf("  same drafts (%s): tau of each rule on the rounds the method drafted\n", set_name.c_str());
  std::printf("  %-42s %8s %9s %9s %9s %9s %15s %9s\n", "method", "rounds", "token", "block", "traversal", "trav/tok",
              "trav-tok (se)", "exact");
  for (std::size_t m = 0; m < methods.size(); ++m) {
    if (!same[m]) {
      std::printf("  %-42s (does not expose its rounds)\n", methods[m].name().c_str());
      continue;
    }
    const auto& c = *same[m];
    const std::string block =
        c.block().rounds == c.token_level().rounds ? fmt::format("{:9.3f}", c.block().tau()) : fmt::format("{:>9}", "-");
    // The exact tau where every round was one-hot (then no rule beats it, in expectation).
    const std::string exact = c.one_hot_exact().rounds == c.token_level().rounds
                                  ? fmt::format("{:9.3f}", c.one_hot_exact().tau())
                                  : fmt::format("{:>9}", "-");
    std::printf("  %-42s %8lld %9.3f %s %9.3f %8.3fx %+7.3f (%.3f) %s\n", methods[m].name().c_str(),
                static_cast<long long>(c.token_level().rounds), c.token_level().tau(), block.c_str(),
                c.traversal().tau(), c.traversal().tau() / c.token_level().tau(), c.traversal_gain().mean(),
                c.traversal_gain().standard_error(), exact.c_str());
  }
}

// Where two precisions' greedy autoregressive outputs of one prompt first
// part: the position, both tokens, and each model's top-2 logit gap there
// (a near-tie in the reference is what a rounding difference can flip).
struct DtypeDifference {
  std::string set;
  std::size_t prompt = 0;
  std::size_t position = 0;  // index into the generated tokens
  TokenId reference_token = 0, other_token = 0;
  double reference_gap = 0.0, other_gap = 0.0;        // top-1 minus top-2 logit
  double reference_margin = 0.0, other_margin = 0.0;  // logit(ref token) - logit(other token)

  nlohmann::json json() const {
    return {{"prompt_set", set},           {"prompt", prompt},
            {"position", position},        {"reference_token", reference_token},
            {"other_token", other_token},  {"reference_top2_gap", reference_gap},
            {"other_top2_gap", other_gap}, {"reference_margin", reference_margin},
            {"other_margin", other_margin}};
  }
};

// The logits after `context` (its last row), from a fresh sequence.
std::vector<float> last_logits(torch_backend::LlamaModel& model, const std::vector<TokenId>& context) {
  constexpr std::int32_t kProbe = 1 << 30;  // a sequence id no method uses
  std::vector<std::int64_t> positions(context.size());
  for (std::size_t i = 0; i < context.size(); ++i) positions[i] = static_cast<std::int64_t>(i);
  HostRows rows;
  const SequenceInput in{kProbe, context, positions};
  ForwardRequest request{std::span(&in, 1)};
  request.logits = rows.view(static_cast<std::int64_t>(context.size()), model.vocab_size());
  model.open(kProbe);
  model.forward(request);
  model.close(kProbe);
  const float* last =
      request.logits.data_as<float>() + (static_cast<std::int64_t>(context.size()) - 1) * model.vocab_size();
  return {last, last + model.vocab_size()};
}

double top2_gap(const std::vector<float>& row) {
  float first = -std::numeric_limits<float>::infinity(), second = first;
  for (const float v : row) {
    if (v > first) {
      second = first;
      first = v;
    } else if (v > second) {
      second = v;
    }
  }
  return static_cast<double>(first) - static_cast<double>(second);
}

DtypeDifference first_difference(const std::string& set, std::size_t prompt_index, const std::vector<TokenId>& prompt,
                                 const std::vector<TokenId>& reference, const std::vector<TokenId>& other,
                                 torch_backend::LlamaModel& reference_model, torch_backend::LlamaModel& other_model) {
  std::size_t i = 0;
  while (i < reference.size() && i < other.size() && reference[i] == other[i]) ++i;
  DtypeDifference d;
  d.set = set;
  d.prompt = prompt_index;
  d.position = i;
  if (i == reference.size() || i == other.size()) return d;  // one stopped early; no token pair to compare
  d.reference_token = reference[i];
  d.other_token = other[i];
  std::vector<TokenId> context = prompt;
  context.insert(context.end(), reference.begin(), reference.begin() + static_cast<std::ptrdiff_t>(i));
  const auto a = last_logits(reference_model, context), o = last_logits(other_model, context);
  d.reference_gap = top2_gap(a);
  d.other_gap = top2_gap(o);
  d.reference_margin = static_cast<double>(a[static_cast<std::size_t>(d.reference_token)]) -
                       a[static_cast<std::size_t>(d.other_token)];
  d.other_margin = static_cast<double>(o[static_cast<std::size_t>(d.reference_token)]) -
                   o[static_cast<std::size_t>(d.other_token)];
  return d;
}

void print_differences(const std::vector<DtypeDifference>& diffs,
                       const std::vector<std::pair<std::string, std::vector<std::string>>>& sets,
                       const std::string& reference) {
  std::size_t generations = 0;
  for (const auto& [name, prompts] : sets) generations += prompts.size();
  std::printf("\ngreedy autoregressive outputs differing from %s: %zu of %zu generations\n", reference.c_str(),
              diffs.size(), generations);
  if (diffs.empty()) return;
  std::printf("  %-12s %6s %8s %9s %9s %12s %12s %12s %12s\n", "prompts", "prompt", "position", "ref tok", "tok",
              "ref top2 gap", "top2 gap", "ref margin", "margin");
  for (const auto& d : diffs)
    std::printf("  %-12s %6zu %8zu %9d %9d %12.4f %12.4f %12.4f %12.4f\n", d.set.c_str(), d.prompt, d.position,
                d.reference_token, d.other_token, d.reference_gap, d.other_gap, d.reference_margin, d.other_margin);
}

// tokens/s of `runs` against `reference`, the same prompts in order. Every
// run generates the same number of tokens, so the total rate is the harmonic
// mean of the per-prompt rates.
nlohmann::json versus(const std::vector<double>& runs, const std::vector<double>& reference,
                      const std::string& reference_name) {
  const auto harmonic = [](const std::vector<double>& v) {
    double inv = 0.0;
    for (const double x : v) inv += 1.0 / x;
    return static_cast<double>(v.size()) / inv;
  };
  std::vector<double> ratios;
  for (std::size_t i = 0; i < runs.size() && i < reference.size(); ++i) ratios.push_back(runs[i] / reference[i]);
  return {{"relative_to", reference_name},
          {"total_ratio", harmonic(runs) / harmonic(reference)},
          {"median_ratio", median(ratios)}};
}

}  // namespace

int run_bench_on_torch(const BenchCommand& b) {
  if (!b.soak.empty()) return run_soak(b);
  check_writable(b.json);  // before the models load and the runs take their time
  // Ctrl-C: the prompts every method finished are reported and written, marked interrupted.
  catch_interrupt();
  if (!b.batches.empty()) return run_batched_bench(b);
  if (!b.contexts.empty())
    throw InvalidArgumentError(
        "bench: --context fills the requests of a batched run; give --batch (1 for one at a time)");
  // One variant per --dtype: its own models, autoregressive baseline and methods.
  // (Held by pointer: the decoders refer to their session's models.)
  struct Variant {
    Session s;
    std::optional<AnyDecoder> ar;
    std::vector<AnyDecoder> methods;
  };
  const std::vector<std::string> dtypes = b.dtypes.empty() ? std::vector<std::string>{"auto"} : b.dtypes;
  std::vector<std::unique_ptr<Variant>> owned;
  for (std::size_t d = 0; d < dtypes.size(); ++d) {
    const auto& dtype = dtypes[d];
    for (std::size_t e = 0; e < d; ++e)
      if (dtypes[e] == dtype) throw InvalidArgumentError(fmt::format("bench: --dtype {} is given twice", dtype));
    owned.push_back(std::make_unique<Variant>(Variant{load_session(b.target, b.draft, b.tokenizer, b.threads, dtype),
                                                      std::nullopt, {}}));
    auto& v = *owned.back();
    // A precision this CPU falls back from (bf16 without native bf16 runs in
    // f32) that an earlier --dtype already runs: one run, with a note, so
    // that one grid serves every CPU.
    bool repeated = false;
    for (std::size_t i = 0; i + 1 < owned.size(); ++i)
      repeated |= owned[i]->s.target.inference_dtype() == v.s.target.inference_dtype();
    if (repeated) {
      fmt::print(stderr, "specdec: --dtype {} runs in {} here, which an earlier --dtype already runs: run once\n",
                 dtype, torch_backend::inference_dtype_name(v.s.target.inference_dtype()));
      owned.pop_back();
      continue;
    }
    v.ar.emplace(
        torch_backend::make_method(torch_backend::parse_method("autoregressive"), v.s.target, nullptr, b.sampling));
    auto* draft = v.s.draft ? &*v.s.draft : nullptr;
    for (const auto& spec : b.methods)
      v.methods.push_back(torch_backend::make_method(torch_backend::parse_method(spec), v.s.target, draft, b.sampling,
                                                     b.target.parent_path()));
  }
  std::vector<std::reference_wrapper<Variant>> variants;
  for (auto& v : owned) variants.emplace_back(*v);
  const auto& tokenizer = owned.front()->s.tokenizer;
  const auto name_of = [&](const Variant& v) {
    return std::string(torch_backend::inference_dtype_name(v.s.target.inference_dtype()));
  };
  GenerationOptions options;
  options.max_new_tokens = b.max_new_tokens;
  options.sampling = b.sampling;  // no EOS stop: every run generates the same length

  std::vector<std::pair<std::string, std::vector<std::string>>> sets;
  std::size_t total_runs = 0;
  for (const auto& path : b.prompt_sets) {
    sets.emplace_back(path.stem().string(), read_prompts(path, b.num_prompts));
    total_runs += sets.back().second.size() * (b.methods.size() + 1) * variants.size();
  }
  {  // warm-up: page in weights, pack oneDNN primitives for every row count seen
    const auto warm_prompt = tokenizer.encode(sets.front().second.front(), true);
    for (int w = 0; w < b.warmup; ++w)
      for (Variant& v : variants) {
        v.ar->generate(warm_prompt, options);
        for (auto& m : v.methods) m.generate(warm_prompt, options);
      }
  }

  const auto contention_at_start = cpu::contention_stats();
  nlohmann::json records = nlohmann::json::array();
  std::printf("%-44s %-5s %-12s %9s %9s %8s %7s %6s %10s %8s\n", "method", "dtype", "prompts", "tok/s", "AR tok/s",
              "speedup", "median", "tau", "ttft ms", "ovh %");
  std::size_t done = 0;
  // tokens/s of every run, [variant][method (0 = autoregressive)][prompt], for
  // the precision comparison.
  std::vector<std::vector<std::vector<double>>> tps_of(variants.size());
  std::vector<DtypeDifference> differences;
  std::vector<std::string> mismatches;  // --check: greedy outputs differing from autoregressive
  std::size_t outputs = 0;
  // Ctrl-C stops after the generation in flight: the prompts every method
  // finished are reported and written, marked interrupted.
  for (const auto& [set_name, all_prompts] : sets) {
    if (interrupted()) break;
    std::vector<Tally> base(variants.size());
    std::vector<std::vector<Tally>> tallies(variants.size(), std::vector<Tally>(b.methods.size()));
    for (auto& t : tps_of) t.assign(b.methods.size() + 1, {});
    std::size_t finished = 0;  // prompts every variant and method finished
    for (std::size_t p = 0; p < all_prompts.size() && !interrupted(); ++p) {
      const std::vector<std::string>& prompts = all_prompts;
      const auto prompt = tokenizer.encode(prompts[p], true);
      std::vector<std::vector<TokenId>> ar_tokens;
      for (std::size_t vi = 0; vi < variants.size() && !interrupted(); ++vi) {
        Variant& v = variants[vi];
        const std::string tag = set_name + (variants.size() > 1 ? " " + name_of(v) : "");
        progress(done++, total_runs, tag + " autoregressive");
        auto before = cpu::contention_stats();
        const auto ref = v.ar->generate(prompt, options);
        base[vi].contention += cpu::contention_stats() - before;
        base[vi].add(ref.stats);
        tps_of[vi][0].push_back(ref.stats.tokens_per_second());
        ar_tokens.push_back(ref.tokens);
        for (std::size_t m = 0; m < v.methods.size() && !interrupted(); ++m) {
          progress(done++, total_runs, tag + " " + v.methods[m].name());
          before = cpu::contention_stats();
          const auto r = v.methods[m].generate(prompt, options);
          tallies[vi][m].contention += cpu::contention_stats() - before;
          tallies[vi][m].add(r.stats);
          tallies[vi][m].speedups.push_back(r.stats.tokens_per_second() / ref.stats.tokens_per_second());
          tps_of[vi][m + 1].push_back(r.stats.tokens_per_second());
          if (b.sampling.is_greedy() && r.tokens != ref.tokens) {
            ++tallies[vi][m].differ;
            mismatches.push_back(fmt::format("{} {} prompt {} ({}): token {}", v.methods[m].name(), name_of(v),
                                             p, set_name, first_mismatch(r.tokens, ref.tokens)));
          }
          ++outputs;
        }
      }
      if (interrupted()) break;  // this prompt is incomplete: its runs are left out
      ++finished;
      if (b.sampling.is_greedy())
        for (std::size_t vi = 1; vi < variants.size(); ++vi)
          if (ar_tokens[vi] != ar_tokens[0])
            differences.push_back(first_difference(set_name, p, prompt, ar_tokens[0], ar_tokens[vi],
                                                   variants[0].get().s.target, variants[vi].get().s.target));
    }
    progress(done, total_runs, "");
    std::fprintf(stderr, "\n");
    if (finished == 0) break;
    const std::vector<std::string> prompts(all_prompts.begin(),
                                           all_prompts.begin() + static_cast<std::ptrdiff_t>(finished));
    for (std::size_t vi = 0; vi < variants.size(); ++vi) {
      Variant& v = variants[vi];
      const auto dtype = v.s.target.inference_dtype();
      std::vector<std::optional<SameDraftsComparison>> same(v.methods.size());
      if (b.same_drafts && !interrupted())
        same = compare_rules_on_same_drafts(v.methods, prompts, tokenizer, options, set_name);
      const double ar_tps = base[vi].total.tokens_per_second();
      auto record = [&](const std::string& name, const Tally& t, bool is_ar) {
        const auto& st = t.total;
        const double tps = st.tokens_per_second();
        std::vector<double> depth;
        for (std::size_t d = 1; d <= st.acceptance.depth_tried.size(); ++d)
          depth.push_back(st.acceptance.conditional_acceptance(d));
        const double ovh = st.target_forward_seconds() > 0
                               ? 100.0 * st.overhead_per_round_seconds() / st.target_forward_seconds()
                               : 0.0;
        std::printf("%-44s %-5s %-12s %9.1f %9.1f %7.2fx %6.2fx %6.2f %10.1f %7.1f%s\n", name.c_str(),
                    name_of(v).c_str(), set_name.c_str(), tps, ar_tps, tps / ar_tps,
                    is_ar ? 1.0 : median(t.speedups), st.acceptance.mean_emitted(), median(t.ttft_ms), ovh,
                    t.differ ? fmt::format("  ({} outputs differ)", t.differ).c_str() : "");
        auto rec = base_record(name, b, st, tps, ar_tps, dtype);
        rec.update({{"prompt_set", set_name},
                    {"prompts", prompts.size()},
                    {"median_speedup", is_ar ? 1.0 : median(t.speedups)},
                    {"acceptance_by_depth", depth},
                    {"zero_accept_rounds", st.acceptance.num_zero_accept},
                    {"verified_nodes_per_round", st.rounds() ? static_cast<double>(st.verified.verified_nodes) /
                                                                    static_cast<double>(st.rounds())
                                                              : 0.0},
                    {"rounds_by_verified_nodes", st.verified.rounds_by_nodes},
                    {"median_time_to_first_token_ms", median(t.ttft_ms)},
                    {"median_prefill_ms", median(t.prefill_ms)},
                    {"target_forward_ms", 1e3 * st.target_forward_seconds()},
                    {"overhead_per_round_us", 1e6 * st.overhead_per_round_seconds()},
                    {"overhead_percent_of_target_forward", ovh},
                    {"draft_seconds", st.draft_seconds},
                    {"verify_seconds", st.verify_seconds},
                    {"accept_seconds", st.accept_seconds},
                    {"target_model_seconds", st.target_model_seconds},
                    {"draft_model_seconds", st.draft_model_seconds},
                    {"draft_layer_seconds", st.draft_layer_seconds},
                    {"draft_head_seconds", st.draft_head_seconds},
                    {"draft_commit_seconds", st.draft_commit_seconds},
                    {"draft_other_seconds", st.draft_layer_seconds > 0 ? st.draft_other_seconds() : 0.0},
                    {"resampled_trees", st.resampling.trees},
                    {"resampled_nodes", st.resampling.nodes},
                    {"resampled_accepted", st.resampling.accepted},
                    {"resampling_separate_forwards", st.resampling.separate_forwards},
                    {"stop_reasons", t.stop_reasons},
                    {"lag", lag_json(st.lag)},
                    {"contention", contention_json(t.contention)},
                    {"outputs_differing_from_autoregressive", t.differ}});
        return rec;
      };
      auto ar_rec = record("autoregressive", base[vi], true);
      if (vi > 0) ar_rec["vs_first_dtype"] = versus(tps_of[vi][0], tps_of[0][0], name_of(variants[0]));
      records.push_back(std::move(ar_rec));
      for (std::size_t m = 0; m < v.methods.size(); ++m) {
        auto rec = record(v.methods[m].name(), tallies[vi][m], false);
        if (same[m]) rec["same_drafts"] = same_drafts_json(*same[m]);
        if (vi > 0) rec["vs_first_dtype"] = versus(tps_of[vi][m + 1], tps_of[0][m + 1], name_of(variants[0]));
        records.push_back(std::move(rec));
      }
      if (b.same_drafts) print_same_drafts(v.methods, same, set_name);
    }
    // The same method in each precision, prompt by prompt.
    for (std::size_t vi = 1; vi < variants.size(); ++vi) {
      std::printf("  %s / %s tokens/s on %s (total, median of per-prompt ratios):", name_of(variants[vi]).c_str(),
                  name_of(variants[0]).c_str(), set_name.c_str());
      for (std::size_t m = 0; m <= b.methods.size(); ++m) {
        const auto r = versus(tps_of[vi][m], tps_of[0][m], name_of(variants[0]));
        std::printf(" %s %.2fx (%.2fx)", m == 0 ? "autoregressive" : variants[vi].get().methods[m - 1].name().c_str(),
                    r["total_ratio"].get<double>(), r["median_ratio"].get<double>());
      }
      std::printf("\n");
    }
  }
  if (variants.size() > 1 && b.sampling.is_greedy()) {
    print_differences(differences, sets, name_of(variants[0]));
    nlohmann::json diff_records = nlohmann::json::array();
    for (const auto& d : differences) diff_records.push_back(d.json());
    records.push_back({{"dtype_differences", diff_records}, {"reference_dtype", name_of(variants[0])}});
  }
  print_contention_note(cpu::contention_stats() - contention_at_start);
  if (interrupted()) {
    for (auto& r : records) r["interrupted"] = true;
    write_records(b.json, records);
    std::printf("[interrupted after %zu of %zu runs: the rows above are the prompts every method finished]\n", done,
                total_runs);
    return kInterruptedExit;
  }
  write_records(b.json, records);
  return finish_check(b, mismatches, outputs);
}

}  // namespace specdec::cli
