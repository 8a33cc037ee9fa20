// Speculative Verification profile files (include/specdec/io/sv_profile.hpp).
#include "specdec/io/sv_profile.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>
#include <vector>

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

// A number field converted to T after checking that it is a number of the
// right kind within T's range: nlohmann's get<T> casts whatever number it
// finds, and a float beyond an integer's range, or a double beyond float's,
// is undefined behaviour (a fuzzed profile found it).
template <class T>
T number(const json& v, const std::filesystem::path& path, std::string_view field) {
  const auto fail = [&](std::string_view what) {
    throw ModelLoadError(fmt::format("{}: field \"{}\" {}, got {}", path.string(), field, what, v.dump()));
  };
  if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) fail("must be an integer");
    const bool fits = v.is_number_unsigned()
                          ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<T>::max())
                          : v.get<std::int64_t>() >= std::numeric_limits<T>::lowest() &&
                                v.get<std::int64_t>() <= std::numeric_limits<T>::max();
    if (!fits) fail("is out of range");
    return v.is_number_unsigned() ? static_cast<T>(v.get<std::uint64_t>()) : static_cast<T>(v.get<std::int64_t>());
  } else {
    if (!v.is_number()) fail("must be a number");
    const double x = v.get<double>();
    if (!(std::abs(x) <= static_cast<double>(std::numeric_limits<T>::max()))) fail("is out of range");
    return static_cast<T>(x);
  }
}

template <class T>
std::vector<T> numbers(const json& v, const std::filesystem::path& path, std::string_view field) {
  if (!v.is_array())
    throw ModelLoadError(fmt::format("{}: field \"{}\" must be an array, got {}", path.string(), field, v.dump()));
  std::vector<T> out;
  out.reserve(v.size());
  for (const auto& x : v) out.push_back(number<T>(x, path, field));
  return out;
}

AcceptanceTable table_of(const json& j, const std::filesystem::path& path, const char* field) {
  try {
    const auto named = [&](const char* key) { return fmt::format("{}.{}", field, key); };
    return AcceptanceTable(numbers<float>(j.at("s_edges"), path, named("s_edges")),
                           numbers<float>(j.at("a_edges"), path, named("a_edges")),
                           numbers<float>(j.at("mean"), path, named("mean")),
                           numbers<std::int64_t>(j.at("counts"), path, named("counts")));
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
  write_text_atomically(path, j.dump(1) + "\n");
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
    p.temperature = number<float>(j.at("temperature"), path, "temperature");
    p.top_k = number<std::int32_t>(j.at("top_k"), path, "top_k");
    p.top_p = number<float>(j.at("top_p"), path, "top_p");
    p.draft_lengths = numbers<std::int32_t>(j.at("draft_lengths"), path, "draft_lengths");
    p.prompts = number<std::int64_t>(j.at("prompts"), path, "prompts");
    p.source = j.value("source", "");
    const auto& e = j.at("entropies");
    const auto entropy = [&](const char* key) { return number<double>(e.at(key), path, key); };
    p.entropies = {entropy("h_x"), entropy("h_x_given_s"), entropy("h_x_given_a"), entropy("h_x_given_s_a")};
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
