// The atomic writers under real write failures: a file-size limit
// (RLIMIT_FSIZE, which makes write() fail with EFBIG as a full disk makes it
// fail with ENOSPC), a temporary that cannot be created, a rename that
// cannot happen. Each is an IoError naming the file, the old file stays
// whole, and no temporary is left behind (docs/hostile_inputs.md).
#include <signal.h>
#include <sys/resource.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "io/io_test_util.hpp"
#include "specdec/core/error.hpp"
#include "specdec/io/file_io.hpp"
#include "specdec/io/llama_config.hpp"
#include "specdec/io/safetensors.hpp"
#include "support/catch.hpp"

using specdec::DType;
using specdec::TensorView;
using namespace specdec::io::testing;

namespace {

// While alive, no file this process writes may grow past `bytes`, and the
// SIGXFSZ that the kernel sends on the attempt is ignored, so write() fails
// with EFBIG instead of killing the process.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_) == 0);
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit lower = old_;
    lower.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &lower) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit old_{};
  void (*old_handler_)(int) = nullptr;
};

std::span<const std::byte> bytes_of_text(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

}  // namespace

TEST_CASE("A write cut short by a full disk is an IoError, the old file stays whole, no temporary is left",
          "[unit][io]") {
  TempDir dir;
  const auto path = dir / "out.json";
  const std::string old_text = "{\"old\": true}\n", big(64 * 1024, 'x');
  specdec::io::write_text_atomically(path, old_text);
  {
    const FileSizeLimit limit(4096);
    check_throws<specdec::IoError>([&] { specdec::io::write_file_atomically(path, {bytes_of_text(big)}); },
                                   {"out.json", "cannot write", "too large"});
    check_throws<specdec::IoError>([&] { specdec::io::append_text(path, big); },
                                   {"out.json", "cannot append"});
  }
  CHECK(read_file(path).substr(0, old_text.size()) == old_text);
  CHECK_FALSE(std::filesystem::exists(dir / "out.json.tmp"));
}

TEST_CASE("A weight file or config.json cut short by a full disk leaves the old one loadable", "[unit][io]") {
  TempDir dir;
  const auto path = dir / "model.safetensors";
  std::vector<float> old_w(16, 1.0f), new_w(8192, 2.0f);
  specdec::io::save_safetensors(path, {{"w", TensorView(old_w.data(), DType::kF32, {16})}});
  specdec::io::LlamaConfig config;
  config.vocab_size = 32;
  config.hidden_size = 8;
  config.intermediate_size = 16;
  config.num_hidden_layers = 1;
  config.num_attention_heads = 2;
  config.num_key_value_heads = 2;
  config.head_dim = 4;
  config.max_position_embeddings = 64;
  specdec::io::save_llama_config(dir / "config.json", config);
  {
    const FileSizeLimit limit(4096);
    check_throws<specdec::IoError>(
        [&] {
          specdec::io::save_safetensors(path, {{"w", TensorView(new_w.data(), DType::kF32, {8192})}});
        },
        {"model.safetensors", "cannot write"});
    const FileSizeLimit tiny(16);  // config.json is longer than 16 bytes
    config.vocab_size = 64;
    check_throws<specdec::IoError>([&] { specdec::io::save_llama_config(dir / "config.json", config); },
                                   {"config.json", "cannot write"});
  }
  const specdec::io::SafetensorsFile f(path);  // whole: its checksum holds
  CHECK(f.view("w").numel() == 16);
  CHECK(specdec::io::load_llama_config(dir / "config.json").vocab_size == 32);
  CHECK_FALSE(std::filesystem::exists(dir / "model.safetensors.tmp"));
  CHECK_FALSE(std::filesystem::exists(dir / "config.json.tmp"));
}

TEST_CASE("A temporary that cannot be created, or a rename that fails, is an IoError naming the file",
          "[unit][io]") {
  TempDir dir;
  write_file(dir / "plain", "a file, not a directory");
  check_throws<specdec::IoError>(
      [&] { specdec::io::write_text_atomically(dir / "plain" / "out.json", "{}"); },
      {"out.json", "cannot create"});
  // A directory with something in it cannot be replaced by a file.
  std::filesystem::create_directories(dir / "taken" / "inside");
  check_throws<specdec::IoError>([&] { specdec::io::write_text_atomically(dir / "taken", "{}"); },
                                 {"taken", "cannot rename"});
  CHECK(std::filesystem::is_directory(dir / "taken" / "inside"));
  CHECK_FALSE(std::filesystem::exists(dir / "taken.tmp"));
}
