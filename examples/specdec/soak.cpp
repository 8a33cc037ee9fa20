#include "soak.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "interrupt.hpp"
#include "session.hpp"
#include "specdec/core/error.hpp"
#include "specdec/engine/any_decoder.hpp"
#include "specdec/torch/methods.hpp"

namespace specdec::cli {

double parse_duration(const std::string& text) {
  const auto bad = [&] {
    return InvalidArgumentError(
        fmt::format("bench: --soak {}: give a positive duration such as 90, 90s, 15m or 2h", text));
  };
  std::size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw bad();
  }
  const std::string unit = text.substr(used);
  const double scale = unit.empty() || unit == "s" ? 1.0 : unit == "m" ? 60.0 : unit == "h" ? 3600.0 : 0.0;
  if (scale == 0.0 || !std::isfinite(value) || value <= 0.0) throw bad();
  return value * scale;
}

namespace {

// The process's resident set (/proc/self/statm), in bytes; -1 where it
// cannot be read.
std::int64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long size = 0, resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<std::int64_t>(resident) * sysconf(_SC_PAGESIZE) : -1;
}

struct RssSample {
  double seconds = 0.0;
  std::int64_t bytes = 0;
  std::int64_t requests = 0;  // finished by then
};

// Samples the resident set every `interval` seconds on its own thread, each
// sample appended to `csv` (when given) as it is taken, so that a killed
// run keeps its curve.
class RssSampler {
 public:
  RssSampler(double interval, const std::filesystem::path& csv, const std::atomic<std::int64_t>& requests)
      : interval_(interval), requests_(requests), start_(std::chrono::steady_clock::now()) {
    if (!csv.empty()) {
      csv_ = std::fopen(csv.c_str(), "w");
      if (csv_ == nullptr) throw IoError(fmt::format("{}: cannot open for writing", csv.string()));
      csv_path_ = csv;
      write_failed_ = std::fprintf(csv_, "seconds,rss_bytes,requests\n") < 0;
    }
    thread_ = std::thread([this] { run(); });
  }
  RssSampler(const RssSampler&) = delete;
  RssSampler& operator=(const RssSampler&) = delete;
  ~RssSampler() {
    try {
      stop();
    } catch (const IoError&) {  // unwinding from another error: that one is reported
    }
  }

  // Takes a last sample and ends the thread; IoError when the CSV could not
  // be written.
  void stop() {
    {
      const std::lock_guard lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
    sample();
    if (csv_ != nullptr && std::fclose(csv_) != 0) write_failed_ = true;
    csv_ = nullptr;
    if (write_failed_)
      throw IoError(fmt::format("{}: writing the memory samples failed", csv_path_.string()));
  }
  std::vector<RssSample> samples() const {
    const std::lock_guard lock(mutex_);
    return samples_;
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      lock.unlock();
      sample();
      lock.lock();
      wake_.wait_for(lock, std::chrono::duration<double>(interval_), [this] { return stopping_; });
    }
  }
  void sample() {
    RssSample s;
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    s.bytes = resident_bytes();
    s.requests = requests_.load();
    const std::lock_guard lock(mutex_);
    samples_.push_back(s);
    if (csv_ != nullptr && (std::fprintf(csv_, "%.3f,%lld,%lld\n", s.seconds, static_cast<long long>(s.bytes),
                                         static_cast<long long>(s.requests)) < 0 ||
                            std::fflush(csv_) != 0))
      write_failed_ = true;
  }

  double interval_;
  const std::atomic<std::int64_t>& requests_;
  std::chrono::steady_clock::time_point start_;
  std::FILE* csv_ = nullptr;
  std::filesystem::path csv_path_;
  bool write_failed_ = false;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<RssSample> samples_;
  std::thread thread_;
};

// One request of the workload.
struct SoakRequest {
  std::vector<TokenId> prompt;
  GenerationOptions options;
  std::int64_t abort_after = -1;  // steps, then aborted if still generating; -1: never
  std::int64_t steps = 0;
  std::size_t generated = 0;  // tokens; once finished, prompt holds them after the prompt
};

struct MethodTally {
  std::string name;
  std::int64_t requests = 0, aborted = 0, tokens = 0;
  double seconds = 0.0;
};

}  // namespace

int run_soak(const BenchCommand& b) {
  const double duration = parse_duration(b.soak);
  // What a soak does not combine with, said before anything loads.
  if (b.batches.size() > 1)
    throw InvalidArgumentError("bench: --soak runs one batch size; give --batch once");
  if (b.dtypes.size() > 1) throw InvalidArgumentError("bench: --soak runs one precision; give --dtype once");
  if (b.same_drafts) throw InvalidArgumentError("bench: --soak does not combine with --same-drafts");
  if (b.check)
    throw InvalidArgumentError(
        "bench: --soak checks its greedy requests against autoregressive decoding itself; "
        "drop --check");
  if (!b.contexts.empty() || b.waves != 0)
    throw InvalidArgumentError("bench: --soak makes its own workload; drop --context and --waves");
  if (!(b.soak_abort >= 0.0 && b.soak_abort < 1.0))
    throw InvalidArgumentError(fmt::format("bench: --soak-abort {} (a probability in [0, 1))", b.soak_abort));
  if (!(b.soak_interval > 0.0))
    throw InvalidArgumentError(fmt::format("bench: --soak-interval {} (seconds, > 0)", b.soak_interval));
  if (b.soak_temperatures.empty()) throw InvalidArgumentError("bench: --soak-temperatures is empty");
  float hottest = 0.0f;
  for (const float t : b.soak_temperatures) {
    if (!(t >= 0.0f) || !std::isfinite(t))
      throw InvalidArgumentError(fmt::format("bench: --soak-temperatures {} (each must be >= 0)", t));
    hottest = std::max(hottest, t);
  }
  if (b.max_new_tokens < 1)
    throw InvalidArgumentError(
        fmt::format("bench: --max-new-tokens {} (a soak needs >= 1)", b.max_new_tokens));
  const std::int32_t batch = b.batches.empty() ? 8 : b.batches.front();
  if (batch < 1) throw InvalidArgumentError(fmt::format("bench: --batch {} (must be >= 1)", batch));
  check_writable(b.json);
  check_writable(b.soak_rss);
  catch_interrupt();

  auto s =
      load_session(b.target, b.draft, b.tokenizer, b.threads, b.dtypes.empty() ? "auto" : b.dtypes.front());
  auto* draft = s.draft ? &*s.draft : nullptr;
  // The methods are built for the hottest temperature (so that rule=auto
  // picks a lossless rule); each request then samples at its own.
  SamplingParams built = b.sampling;
  built.temperature = hottest;
  std::vector<AnyDecoder> methods;
  std::vector<MethodTally> tally;
  for (const auto& spec : b.methods) {
    methods.push_back(torch_backend::make_method(torch_backend::parse_method(spec), s.target, draft, built,
                                                 b.target.parent_path()));
    tally.push_back({spec});
  }
  SamplingParams greedy = b.sampling;
  greedy.temperature = 0.0f;
  auto reference =
      torch_backend::make_method(torch_backend::parse_method("autoregressive"), s.target, nullptr, greedy);
  std::vector<std::vector<TokenId>> prompts;
  for (const auto& path : b.prompt_sets)
    for (const auto& text : read_prompts(path, b.num_prompts))
      prompts.push_back(s.tokenizer.encode(text, true));
  if (prompts.empty()) throw InvalidArgumentError("bench: --soak found no prompts");

  std::mt19937_64 rng(b.sampling.seed);
  const auto uniform = [&](std::int64_t lo, std::int64_t hi) {  // inclusive
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  std::uint64_t next_id = 0;
  // A random prompt's random prefix (at least its first token), a random
  // length that fits the context, a temperature from the list, and maybe an
  // abort after a random number of steps.
  const auto make_request = [&] {
    SoakRequest r;
    const auto& p =
        prompts[static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(prompts.size()) - 1))];
    const auto room = s.target.max_context() - 1;
    const auto keep = std::min<std::int64_t>(uniform(1, static_cast<std::int64_t>(p.size())), room);
    r.prompt.assign(p.begin(), p.begin() + keep);
    r.options.max_new_tokens =
        uniform(1, std::min<std::int64_t>(b.max_new_tokens, s.target.max_context() - keep));
    r.options.sampling = b.sampling;
    r.options.sampling.temperature = b.soak_temperatures[static_cast<std::size_t>(
        uniform(0, static_cast<std::int64_t>(b.soak_temperatures.size()) - 1))];
    r.options.request_id = next_id++;
    if (r.options.max_new_tokens > 1 && std::bernoulli_distribution(b.soak_abort)(rng))
      r.abort_after = uniform(1, r.options.max_new_tokens - 1);
    return r;
  };

  std::atomic<std::int64_t> finished{0};
  RssSampler sampler(b.soak_interval, b.soak_rss, finished);
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const std::int64_t wave_size = 8 * static_cast<std::int64_t>(batch);  // requests per method in turn
  constexpr std::int64_t kCheckEvery = 16;  // every 16th finished greedy request is checked
  std::int64_t greedy_finished = 0, checked = 0, tokens = 0, aborted = 0;
  double warm_seconds = -1.0;
  double next_report = 10.0;  // seconds, progress on stderr
  std::vector<std::string> mismatches;
  std::fprintf(stderr, "soak: %s, %zu methods, batch %d, temperatures %s, %.0f%% aborted\n", b.soak.c_str(),
               methods.size(), batch, fmt::format("{}", fmt::join(b.soak_temperatures, ", ")).c_str(),
               100.0 * b.soak_abort);
  for (std::size_t wave = 0; elapsed() < duration && !interrupted(); ++wave) {
    const std::size_t m = wave % methods.size();
    AnyDecoder& decoder = methods[m];
    const auto wave_start = std::chrono::steady_clock::now();
    std::vector<SoakRequest> queue;
    for (std::int64_t i = 0; i < wave_size; ++i) queue.push_back(make_request());
    std::vector<std::pair<AnyDecoder::RequestId, std::size_t>> live;  // (id, queue index)
    std::vector<std::size_t> to_check;
    std::size_t next = 0;
    const auto finish = [&](AnyDecoder::RequestId id, std::size_t q, bool was_aborted) {
      auto result = decoder.take_result(id);
      auto& r = queue[q];
      tokens += static_cast<std::int64_t>(result.tokens.size());
      tally[m].tokens += static_cast<std::int64_t>(result.tokens.size());
      ++tally[m].requests;
      if (was_aborted) {
        ++aborted;
        ++tally[m].aborted;
      } else if (r.options.sampling.is_greedy() && greedy_finished++ % kCheckEvery == 0) {
        r.generated = result.tokens.size();
        r.prompt.insert(r.prompt.end(), result.tokens.begin(), result.tokens.end());
        to_check.push_back(q);
      }
      ++finished;
    };
    while (next < queue.size() || !live.empty()) {
      while (live.size() < static_cast<std::size_t>(batch) && next < queue.size()) {
        const auto id = static_cast<AnyDecoder::RequestId>(next);
        decoder.begin(id, queue[next].prompt, queue[next].options);
        live.emplace_back(id, next++);
      }
      decoder.step();
      for (std::size_t i = 0; i < live.size();) {
        const auto [id, q] = live[i];
        auto& r = queue[q];
        ++r.steps;
        const bool done = decoder.done(id);
        if (!done && r.steps == r.abort_after) decoder.abort(id);
        if (done || r.steps == r.abort_after) {
          finish(id, q, !done);
          live[i] = live.back();
          live.pop_back();
        } else {
          ++i;
        }
      }
    }
    tally[m].seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - wave_start).count();
    // The spot checks, with no request of the wave open on the target.
    for (const auto q : to_check) {
      const auto& r = queue[q];
      const auto n = static_cast<std::size_t>(r.options.max_new_tokens);
      const auto got = std::span(r.prompt).last(r.generated);
      const auto prompt = std::span(r.prompt).first(r.prompt.size() - r.generated);
      GenerationOptions o;
      o.max_new_tokens = r.options.max_new_tokens;
      const auto want = reference.generate(prompt, o).tokens;
      ++checked;
      if (!std::equal(want.begin(), want.end(), got.begin(), got.end()))
        mismatches.push_back(fmt::format("{} request {} ({} prompt tokens, {} new)", b.methods[m],
                                         r.options.request_id, prompt.size(), n));
    }
    // Warmed up: every method has run a wave and a tenth of the run is over.
    if (warm_seconds < 0.0 && wave + 1 >= methods.size() && elapsed() >= 0.1 * duration)
      warm_seconds = elapsed();
    if (elapsed() >= next_report) {
      next_report += 10.0;
      std::fprintf(stderr, "\r  %.0f s: %lld requests, %lld tokens, %lld checked, %zu differing   ",
                   elapsed(), static_cast<long long>(finished.load()), static_cast<long long>(tokens),
                   static_cast<long long>(checked), mismatches.size());
    }
  }
  std::fprintf(stderr, "\n");
  const double seconds = elapsed();
  sampler.stop();
  const auto samples = sampler.samples();

  // Resident memory after warm-up (the first sample at or after it) against
  // the end and the peak.
  std::int64_t warm = -1, peak = 0;
  for (const auto& x : samples) {
    if (warm < 0 && warm_seconds >= 0.0 && x.seconds >= warm_seconds) warm = x.bytes;
    if (warm >= 0) peak = std::max(peak, x.bytes);
  }
  const std::int64_t last = samples.empty() ? -1 : samples.back().bytes;
  const double growth = warm > 0 ? 100.0 * static_cast<double>(last - warm) / static_cast<double>(warm) : 0.0;
  std::printf("soak: %.0f s, %lld requests (%lld aborted), %lld tokens, %.0f tokens/s, batch %d\n", seconds,
              static_cast<long long>(finished.load()), static_cast<long long>(aborted),
              static_cast<long long>(tokens), static_cast<double>(tokens) / seconds, batch);
  for (const auto& t : tally)
    std::printf("  %-32s %8lld requests (%lld aborted) %10lld tokens %8.1f tokens/s\n", t.name.c_str(),
                static_cast<long long>(t.requests), static_cast<long long>(t.aborted),
                static_cast<long long>(t.tokens),
                t.seconds > 0.0 ? static_cast<double>(t.tokens) / t.seconds : 0.0);
  std::printf("greedy outputs checked against autoregressive decoding: %lld, differing: %zu\n",
              static_cast<long long>(checked), mismatches.size());
  for (const auto& x : mismatches) std::printf("  differs: %s\n", x.c_str());
  if (warm > 0)
    std::printf(
        "resident memory: %.1f MB after warm-up (%.0f s), %.1f MB at the end, peak %.1f MB: %+.2f%%\n",
        static_cast<double>(warm) / 1e6, warm_seconds, static_cast<double>(last) / 1e6,
        static_cast<double>(peak) / 1e6, growth);
  else
    std::printf(
        "resident memory: %.1f MB at the end (the run ended before its warm-up did: every method's first "
        "wave and a tenth of the run)\n",
        static_cast<double>(last) / 1e6);
  if (!b.json.empty()) {
    nlohmann::json j;
    j["soak"] = {{"duration_seconds", duration},
                 {"seconds", seconds},
                 {"batch", batch},
                 {"temperatures", b.soak_temperatures},
                 {"abort_probability", b.soak_abort},
                 {"max_new_tokens", b.max_new_tokens},
                 {"requests", finished.load()},
                 {"aborted", aborted},
                 {"tokens", tokens},
                 {"checked", checked},
                 {"mismatches", mismatches},
                 {"rss_warm_bytes", warm},
                 {"rss_end_bytes", last},
                 {"rss_peak_bytes", peak},
                 {"rss_growth_percent", growth},
                 {"warm_seconds", warm_seconds},
                 {"interrupted", interrupted()}};
    for (const auto& t : tally)
      j["methods"].push_back({{"method", t.name},
                              {"requests", t.requests},
                              {"aborted", t.aborted},
                              {"tokens", t.tokens},
                              {"seconds", t.seconds}});
    for (const auto& x : samples) j["rss_samples"].push_back({x.seconds, x.bytes, x.requests});
    write_text_file(b.json, j.dump(2) + "\n");
  }
  if (interrupted()) return kInterruptedExit;
  return mismatches.empty() ? 0 : 1;
}

}  // namespace specdec::cli
