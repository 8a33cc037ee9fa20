// Speculative Verification profile files (include/specdec/io/sv_profile.hpp).
#include "specdec/io/sv_profile.hpp"

#include <cmath>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "specdec/core/error.hpp"
#include "specdec/io/file_io.hpp"

namespace specdec::io {
namespace {

using json = nlohmann::json;

json table_json(const AcceptanceTable& t) {
  return {{"s_edges", t.s_edges()}, {"a_edges", t.a_edges()}, {"mean", t.mean()}, {"counts", t.counts()}};
}

AcceptanceTable table_of(const json& j, const std::filesystem::path& path, const char* field) {
  try {
    return AcceptanceTable(j.at("s_edges").get<std::vector<float>>(), j.at("a_edges").get<std::vector<float>>(),
                           j.at("mean").get<std::vector<float>>(), j.at("counts").get<std::vector<std::int64_t>>());
  } catch (const json::exception& e) {
    throw ModelLoadError(fmt::format("{}: field \"{}\": {}", path.string(), field, e.what()));
  } catch (const Error& e) {
    throw ModelLoadError(fmt::format("{}: field \"{}\": {}", path.string(), field, e.what()));
  }
}

std::string number(float v) { return fmt::format("{:g}", v); }

}  // namespace

bool SvProfile::matches(const SamplingParams& s) const {
  if (s.is_greedy()) return temperature == 0.0f;
  return temperature == s.temperature && top_k == s.top_k && top_p == s.top_p;
}

std::string sv_profile_name(const SamplingParams& sampling, const std::string& drafts) {
  if (sampling.is_greedy()) return "t0.json";
  return fmt::format("t{}{}{}-{}.json", number(sampling.temperature),
                     sampling.top_k > 0 ? fmt::format("-k{}", sampling.top_k) : std::string(),
                     sampling.top_p < 1.0f ? fmt::format("-p{}", number(sampling.top_p)) : std::string(), drafts);
}

void write_sv_profile(const std::filesystem::path& path, const SvProfile& p) {
  const json j = {{"format", "specdec sv profile 1"},
                  {"drafts", p.drafts},
                  {"temperature", p.temperature},
                  {"top_k", p.top_k},
                  {"top_p", p.top_p},
                  {"draft_lengths", p.draft_lengths},
                  {"prompts", p.prompts},
                  {"source", p.source},
                  {"entropies",
                   {{"h_x", p.entropies.h_x},
                    {"h_x_given_s", p.entropies.h_x_s},
                    {"h_x_given_a", p.entropies.h_x_a},
                    {"h_x_given_s_a", p.entropies.h_x_sa},
                    {"information_gain", p.entropies.gain()}}},
                  {"joint", table_json(p.joint)},
                  {"similarity", table_json(p.similarity)}};
  std::ofstream out(path);
  if (!out) throw IoError(fmt::format("{}: cannot write", path.string()));
  out << j.dump(1) << "\n";
  if (!out) throw IoError(fmt::format("{}: write failed", path.string()));
}

SvProfile read_sv_profile(const std::filesystem::path& path) {
  json j;
  try {
    j = json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    throw ModelLoadError(fmt::format("{}: not JSON ({})", path.string(), e.what()));
  }
  SvProfile p;
  try {
    if (j.at("format").get<std::string>() != "specdec sv profile 1")
      throw ModelLoadError(fmt::format("{}: not a specdec sv profile (format \"{}\")", path.string(),
                                       j.at("format").get<std::string>()));
    p.drafts = j.at("drafts").get<std::string>();
    p.temperature = j.at("temperature").get<float>();
    p.top_k = j.at("top_k").get<std::int32_t>();
    p.top_p = j.at("top_p").get<float>();
    p.draft_lengths = j.at("draft_lengths").get<std::vector<std::int32_t>>();
    p.prompts = j.at("prompts").get<std::int64_t>();
    p.source = j.value("source", "");
    const auto& e = j.at("entropies");
    p.entropies = {e.at("h_x").get<double>(), e.at("h_x_given_s").get<double>(), e.at("h_x_given_a").get<double>(),
                   e.at("h_x_given_s_a").get<double>()};
  } catch (const json::exception& e) {
    throw ModelLoadError(fmt::format("{}: {}", path.string(), e.what()));
  }
  if (p.drafts != "top1" && p.drafts != "sample")
    throw ModelLoadError(fmt::format("{}: field \"drafts\" is \"{}\" (top1 or sample)", path.string(), p.drafts));
  for (const char* field : {"joint", "similarity"})
    if (!j.contains(field)) throw ModelLoadError(fmt::format("{}: no field \"{}\"", path.string(), field));
  p.joint = table_of(j["joint"], path, "joint");
  p.similarity = table_of(j["similarity"], path, "similarity");
  if (!p.similarity.similarity_only())
    throw ModelLoadError(fmt::format("{}: field \"similarity\" has {} A bins (must be 1)", path.string(),
                                     p.similarity.a_bins()));
  return p;
}

}  // namespace specdec::io
