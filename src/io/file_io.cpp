// POSIX file helpers: whole-file reads and atomic (write, fsync, rename) writes.
#include "specdec/io/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "specdec/core/error.hpp"

namespace specdec::io {
namespace {

// Closes a descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

}  // namespace

std::string read_text_file(const std::filesystem::path& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0)
    throw ModelLoadError(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw ModelLoadError(fmt::format("{}: cannot stat: {}", path.string(), std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw ModelLoadError(fmt::format("{}: not a regular file", path.string()));
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ::ssize_t n = ::read(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw ModelLoadError(fmt::format("{}: cannot read: {}", path.string(), std::strerror(errno)));
    if (n == 0) break;  // shrank while reading
    done += static_cast<std::size_t>(n);
  }
  text.resize(done);
  return text;
}

void write_file_atomically(const std::filesystem::path& path,
                           const std::vector<std::span<const std::byte>>& pieces) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  const auto fail = [&](std::string_view what) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("{}: cannot {}: {}", path.string(), what, std::strerror(err)));
  };
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0)
    throw IoError(fmt::format("{}: cannot create {}: {}", path.string(), tmp.string(), std::strerror(errno)));
  for (const auto piece : pieces) {
    const auto* p = reinterpret_cast<const char*>(piece.data());
    std::size_t left = piece.size();
    while (left > 0) {
      const ::ssize_t n = ::write(fd.get(), p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("write");
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  }
  if (::fsync(fd.get()) != 0) fail("flush");
  if (::close(fd.release()) != 0) fail("close");
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename the temporary file into place");
}

void write_text_atomically(const std::filesystem::path& path, std::string_view text) {
  write_file_atomically(path, {std::as_bytes(std::span(text.data(), text.size()))});
}

void append_text(const std::filesystem::path& path, std::string_view text, bool sync) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (fd.get() < 0)
    throw IoError(fmt::format("{}: cannot open for appending: {}", path.string(), std::strerror(errno)));
  while (!text.empty()) {
    const ::ssize_t n = ::write(fd.get(), text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw IoError(fmt::format("{}: cannot append: {}", path.string(), std::strerror(errno)));
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  if (sync && ::fsync(fd.get()) != 0)
    throw IoError(fmt::format("{}: cannot flush to disk: {}", path.string(), std::strerror(errno)));
}

}  // namespace specdec::io
