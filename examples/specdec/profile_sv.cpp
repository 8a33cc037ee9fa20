// `specdec profile-sv`: Speculative Verification's offline profile (Kim et
// al., arXiv 2509.24328, §4.2). Standard speculative decoding at draft
// lengths 3, 5 and 7 on held-out prompts records every drafted token's
// indicators (S, A) and X, the probability that the target accepts it; S and
// A are binned with equal-frequency bins and the acceptance table (mean X per
// cell) is saved as JSON next to the models. Prints the paper's Table 2:
// H(X), H(X|S), H(X|A), H(X|S,A) and the information gain, per prompt set,
// for several binnings.
#include "profile_sv.hpp"

#include <cmath>
#include <cstdio>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "session.hpp"
#include "specdec/core/error.hpp"
#include "specdec/io/sv_profile.hpp"
#include "specdec/torch/methods.hpp"

namespace specdec::cli {
namespace {

// H(X|.) corrected for the plug-in estimator's downward bias
// (Miller-Madow: + (occupied X bins - 1) / 2N nats per condition), so
// binnings with many cells compare fairly on a finite sample.
double miller_madow(std::span<const AcceptanceSample> samples, const AcceptanceTable& table, std::int32_t x_bins,
                    bool by_s, bool by_a) {
  std::map<std::pair<std::size_t, std::int32_t>, std::int64_t> seen;
  for (const auto& x : samples) {
    const std::size_t s = by_s ? static_cast<std::size_t>(bin_of(table.s_edges(), x.s)) : 0;
    const std::size_t a = by_a ? static_cast<std::size_t>(bin_of(table.a_edges(), x.a)) : 0;
    const auto bx = std::min(x_bins - 1, static_cast<std::int32_t>(x.x * static_cast<float>(x_bins)));
    ++seen[{s * 1000 + a, bx}];
  }
  std::map<std::size_t, std::int64_t> occupied;
  for (const auto& [key, n] : seen) ++occupied[key.first];
  double extra = 0.0;
  for (const auto& [c, m] : occupied) extra += static_cast<double>(m - 1);
  return extra / (2.0 * static_cast<double>(samples.size()) * std::log(2.0));
}

struct Report {
  AcceptanceEntropies plug_in;
  AcceptanceEntropies corrected;
  double mean_x = 0.0;
  std::size_t samples = 0;
  std::int32_t cells = 0;
};

Report report(std::span<const AcceptanceSample> samples, std::int32_t s_bins, std::int32_t a_bins,
              std::int32_t x_bins) {
  const auto table = AcceptanceTable::fit(samples, s_bins, a_bins);
  Report r;
  r.plug_in = entropies(samples, table, x_bins);
  r.corrected = r.plug_in;
  r.corrected.h_x += miller_madow(samples, table, x_bins, false, false);
  r.corrected.h_x_s += miller_madow(samples, table, x_bins, true, false);
  r.corrected.h_x_a += miller_madow(samples, table, x_bins, false, true);
  r.corrected.h_x_sa += miller_madow(samples, table, x_bins, true, true);
  for (const auto& x : samples) r.mean_x += x.x;
  r.mean_x /= static_cast<double>(samples.size());
  r.samples = samples.size();
  r.cells = table.s_bins() * table.a_bins();
  return r;
}

nlohmann::json entropies_json(const AcceptanceEntropies& e) {
  return {{"h_x", e.h_x}, {"h_x_given_s", e.h_x_s}, {"h_x_given_a", e.h_x_a}, {"h_x_given_s_a", e.h_x_sa},
          {"information_gain", e.gain()}};
}

}  // namespace

void add_profile_sv_options(CLI::App& cmd, ProfileSvCommand& p) {
  cmd.add_option("--target", p.target, "target model directory");
  cmd.add_option("--draft", p.draft, "draft model directory");
  cmd.add_option("--companion", p.companion, "companion model directory");
  cmd.add_option("--tokenizer", p.tokenizer, "tokenizer (default: beside --target)");
  cmd.add_option("--prompts", p.prompt_sets, "held-out prompt sets (JSON lines; not the bench's)")->required();
  cmd.add_option("--num-prompts", p.num_prompts, "prompts per set (the first N)");
  cmd.add_option("--length", p.lengths, "draft lengths profiled (repeat)");
  cmd.add_option("--max-new-tokens", p.max_new_tokens, "tokens per generation");
  cmd.add_option("--drafts", p.drafts, "top1 (deterministic chains) or sample");
  add_sampling_options(cmd, p.sampling);
  cmd.add_option("--s-bins", p.s_bins, "equal-frequency bins of S in the saved table");
  cmd.add_option("--a-bins", p.a_bins, "equal-frequency bins of A in the saved table");
  cmd.add_option("--x-bins", p.x_bins, "equal-width bins X is quantised into for the entropies");
  cmd.add_option("--batch", p.batch, "requests profiled at once");
  cmd.add_option("--out", p.out, "the acceptance table (default: sv/<sampling>.json beside --target)");
  cmd.add_option("--json", p.json, "write the entropy report as JSON here");
  cmd.add_option("--threads", p.threads, "CPU threads (0 = all cores)");
  add_dtype_option(cmd, p.dtype);
}

int run_profile_sv(const ProfileSvCommand& c) {
  if (c.batch < 1) throw InvalidArgumentError("profile-sv: --batch must be >= 1");
  if (c.drafts == "sample" && c.sampling.is_greedy())
    throw InvalidArgumentError("profile-sv: --drafts sample needs --temperature > 0 (greedy decoding drafts top-1)");
  check_writable(c.json);
  auto s = load_session(c.target, c.draft, c.tokenizer, c.threads, c.dtype);
  if (!s.draft) throw InvalidArgumentError("profile-sv: needs --draft");
  auto companion = torch_backend::LlamaModel::load(c.companion);
  companion.set_inference_dtype(s.target.inference_dtype());
  companion.check_tokenizer_vocab(s.tokenizer.vocab_size(), s.tokenizer_path.string());
  if (companion.max_context() < s.target.max_context())
    throw InvalidArgumentError(fmt::format("profile-sv: the companion holds {} tokens of context, the target {}",
                                           companion.max_context(), s.target.max_context()));

  std::map<std::string, std::vector<AcceptanceSample>> by_set;
  std::map<std::int32_t, std::vector<AcceptanceSample>> by_length;
  std::vector<AcceptanceSample> all;
  for (const auto& path : c.prompt_sets) {
    std::vector<std::vector<TokenId>> prompts;
    for (const auto& text : read_prompts(path, c.num_prompts)) prompts.push_back(s.tokenizer.encode(text, true));
    for (const auto length : c.lengths) {
      std::fprintf(stderr, "%s: draft length %d, %zu prompts\n", path.stem().string().c_str(), length, prompts.size());
      torch_backend::SvProfileOptions o;
      o.length = length;
      o.drafts = c.drafts;
      o.max_new_tokens = c.max_new_tokens;
      o.batch = static_cast<std::size_t>(c.batch);
      const auto got =
          torch_backend::profile_sv_samples(s.target, *s.draft, companion, c.sampling, prompts, o);
      auto& set = by_set[path.stem().string()];
      set.insert(set.end(), got.begin(), got.end());
      by_length[length].insert(by_length[length].end(), got.begin(), got.end());
      all.insert(all.end(), got.begin(), got.end());
    }
  }
  if (all.empty()) throw InvalidArgumentError("profile-sv: no drafted tokens were recorded");

  // The paper's Table 2 layout: rows H(X), H(X|S), H(X|A), H(X|S,A), IG; one
  // column per prompt set (and all), for the saved binning and others.
  std::vector<std::pair<std::string, const std::vector<AcceptanceSample>*>> columns;
  for (const auto& [name, v] : by_set) columns.emplace_back(name, &v);
  for (const auto& [len, v] : by_length) columns.emplace_back(fmt::format("k={}", len), &v);
  columns.emplace_back("all", &all);
  const std::vector<std::pair<std::int32_t, std::int32_t>> binnings = {
      {5, 5}, {10, 10}, {c.s_bins, c.a_bins}, {30, 20}};
  nlohmann::json out_report = nlohmann::json::array();
  std::printf("X quantised into %d equal-width bins; S and A in equal-frequency bins; bits.\n", c.x_bins);
  std::printf("plug-in estimate [Miller-Madow corrected]\n");
  for (const auto& [sb, ab] : binnings) {
    std::printf("\nbins S %d x A %d\n%-14s", sb, ab, "");
    std::vector<Report> reports;
    for (const auto& [name, v] : columns) {
      reports.push_back(report(*v, sb, ab, c.x_bins));
      std::printf(" %21s", name.c_str());
    }
    std::printf("\n");
    auto row = [&](const char* label, auto get) {
      std::printf("%-14s", label);
      for (const auto& r : reports) std::printf("      %6.3f [%6.3f]", get(r.plug_in), get(r.corrected));
      std::printf("\n");
    };
    row("H(X)", [](const AcceptanceEntropies& e) { return e.h_x; });
    row("H(X|S)", [](const AcceptanceEntropies& e) { return e.h_x_s; });
    row("H(X|A)", [](const AcceptanceEntropies& e) { return e.h_x_a; });
    row("H(X|S,A)", [](const AcceptanceEntropies& e) { return e.h_x_sa; });
    row("IG", [](const AcceptanceEntropies& e) { return e.gain(); });
    std::printf("%-14s", "samples");
    for (const auto& r : reports) std::printf(" %21zu", r.samples);
    std::printf("\n%-14s", "mean X");
    for (const auto& r : reports) std::printf(" %21.3f", r.mean_x);
    std::printf("\n");
    for (std::size_t i = 0; i < columns.size(); ++i)
      out_report.push_back({{"column", columns[i].first},
                            {"s_bins", sb},
                            {"a_bins", ab},
                            {"cells", reports[i].cells},
                            {"samples", reports[i].samples},
                            {"mean_x", reports[i].mean_x},
                            {"plug_in", entropies_json(reports[i].plug_in)},
                            {"miller_madow", entropies_json(reports[i].corrected)}});
  }

  io::SvProfile profile;
  profile.drafts = c.drafts;
  profile.temperature = c.sampling.temperature;
  profile.top_k = c.sampling.top_k;
  profile.top_p = c.sampling.top_p;
  profile.draft_lengths = c.lengths;
  profile.prompts = static_cast<std::int64_t>(c.num_prompts);
  profile.joint = AcceptanceTable::fit(all, c.s_bins, c.a_bins);
  profile.similarity = AcceptanceTable::fit(all, c.s_bins, 1);
  profile.entropies = entropies(all, profile.joint, c.x_bins);
  std::string sets;
  for (const auto& p : c.prompt_sets) sets += (sets.empty() ? "" : ", ") + p.string();
  profile.source = fmt::format("target {}, draft {}, companion {}; prompts {} (first {} each); {} samples",
                               c.target.string(), c.draft.string(), c.companion.string(), sets, c.num_prompts,
                               all.size());
  const auto out = c.out.empty() ? c.target.parent_path() / "sv" / io::sv_profile_name(c.sampling, c.drafts) : c.out;
  std::filesystem::create_directories(out.parent_path());
  io::write_sv_profile(out, profile);
  std::printf("\nwrote %s (%d x %d bins, %zu samples)\n", out.string().c_str(), profile.joint.s_bins(),
              profile.joint.a_bins(), all.size());
  if (!c.json.empty()) {
    write_text_file(c.json, out_report.dump(2) + "\n");
    std::printf("wrote %s\n", c.json.string().c_str());
  }
  return 0;
}

}  // namespace specdec::cli
