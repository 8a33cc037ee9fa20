// SV profile files (io/sv_profile.hpp): a profile survives its own file, and
// numbers of the wrong kind or range are typed errors naming the file and the
// field (a fuzzed file once had a count of 1.37e22, read through a cast that
// is undefined behaviour).
#include "specdec/io/sv_profile.hpp"

#include <nlohmann/json.hpp>

#include <string>

#include "io_test_util.hpp"
#include "specdec/core/error.hpp"

namespace {

using specdec::ModelLoadError;
using specdec::io::testing::check_throws;
using specdec::io::testing::TempDir;
using specdec::io::testing::write_file;

specdec::io::SvProfile small_profile() {
  specdec::io::SvProfile p;
  p.drafts = "top1";
  p.temperature = 0.7f;
  p.top_k = 40;
  p.top_p = 0.9f;
  p.draft_lengths = {3, 5};
  p.prompts = 12;
  p.joint = specdec::AcceptanceTable({0.5f}, {0.25f}, {0.1f, 0.2f, 0.3f, 0.4f}, {5, 6, 7, 8});
  p.similarity = specdec::AcceptanceTable({0.5f}, {}, {0.3f, 0.6f}, {9, 10});
  p.entropies = {1.0, 0.9, 0.8, 0.7};
  p.source = "test";
  return p;
}

}  // namespace

TEST_CASE("An SV profile reads back what was written", "[unit][io]") {
  const TempDir dir;
  const auto path = dir.path() / "p.json";
  specdec::io::write_sv_profile(path, small_profile());
  const auto back = specdec::io::read_sv_profile(path);
  CHECK(back.top_k == 40);
  CHECK(back.temperature == 0.7f);
  CHECK(back.draft_lengths == std::vector<std::int32_t>{3, 5});
  CHECK(back.prompts == 12);
  CHECK(back.joint.counts() == std::vector<std::int64_t>{5, 6, 7, 8});
  CHECK(back.similarity.mean() == std::vector<float>{0.3f, 0.6f});
}

TEST_CASE("SV profile numbers of the wrong kind or range are typed errors naming the field", "[unit][io]") {
  const TempDir dir;
  const auto path = dir.path() / "p.json";
  specdec::io::write_sv_profile(path, small_profile());
  const auto good = nlohmann::json::parse(specdec::io::testing::read_file(path));
  const auto with = [&](const char* pointer, const nlohmann::json& value) {
    auto j = good;
    j[nlohmann::json::json_pointer(pointer)] = value;
    write_file(path, j.dump());
  };
  const auto read = [&] { (void)specdec::io::read_sv_profile(path); };
  with("/joint/counts/2", 1.37e22);  // beyond int64 (the fuzzer's find)
  check_throws<ModelLoadError>(read, {"p.json", "joint.counts", "must be an integer"});
  with("/joint/counts/2", nlohmann::json::parse("13700000000000000000000"));  // the same, as written in the file
  check_throws<ModelLoadError>(read, {"joint.counts"});
  with("/prompts", 18446744073709551615ull);  // an unsigned integer beyond int64
  check_throws<ModelLoadError>(read, {"prompts", "out of range"});
  with("/top_k", 3.5);
  check_throws<ModelLoadError>(read, {"top_k", "must be an integer"});
  with("/top_k", 4294967296LL);  // beyond int32
  check_throws<ModelLoadError>(read, {"top_k", "out of range"});
  with("/temperature", 1e300);  // beyond float
  check_throws<ModelLoadError>(read, {"temperature", "out of range"});
  with("/draft_lengths", "3");
  check_throws<ModelLoadError>(read, {"draft_lengths", "must be an array"});
  with("/entropies/h_x", "high");
  check_throws<ModelLoadError>(read, {"h_x", "must be a number"});
}
