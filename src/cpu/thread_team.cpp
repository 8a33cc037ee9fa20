#include "thread_team.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/cpu/threads.hpp"

namespace specdec::cpu {
namespace {

using Clock = std::chrono::steady_clock;

// A helper spins this long for the next job before it sleeps. The steps of
// a forward follow each other within microseconds, but a drafter's host work
// between two draft forwards (trees, sampling) takes hundreds: a helper that
// slept there costs the next job a system call to wake it and its first
// items (measured: 0.3 ms of spin made EAGLE-style and Lyanna decoding 3-5%
// slower than 2 ms; libgomp spins for a similar time).
constexpr auto kHelperSpin = std::chrono::microseconds(2000);
// The caller waits this long beyond its own share of a job for a helper's
// started items before it calls the wait a stall: a helper that runs
// finishes an item within about the time the caller took for its share.
constexpr auto kStallMargin = std::chrono::microseconds(200);
// Every kWindow of team work the caller adds up what contention cost it: its
// waits in stalls, and how long it waited on a run queue itself (runnable,
// but another task had its core: Linux's schedstat). More than kLostShare of
// the window starts a back-off. A caller that shares its core holds up the
// whole team, while alone it is moved to a free core (the OS balances a lone
// runnable thread onto an idle core once the helpers sleep); a helper that
// shares its core shows as stalls. One short stall (an interrupt, the
// hypervisor) is far below the share and changes nothing.
constexpr auto kWindow = std::chrono::milliseconds(50);
constexpr double kLostShare = 0.2;
// After a back-off the team runs alone on the calling thread. Every kRecheck
// it reads how much of the cores this process may use sat idle meanwhile
// (/proc/stat); it runs as a team again once kFreeCore of a core per helper
// was idle. Waiting for idle cores, rather than trying the team again, does
// not disturb the OS's placement of the threads (a lone thread beside busy
// ones is left a core of its own) and costs no stall per try.
constexpr auto kRecheck = std::chrono::milliseconds(100);
constexpr double kFreeCore = 0.75;

// A thread's schedstat, open for reading its run-queue wait.
int open_schedstat() {
#if defined(__linux__)
  return ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
#else
  return -1;
#endif
}
// Nanoseconds the thread behind `fd` has waited on a run queue (the second
// field), or -1.
std::int64_t run_queue_wait_ns(int fd) {
  if (fd < 0) return -1;
  char buf[96];
  const auto n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return -1;
  buf[n] = '\0';
  unsigned long long running = 0, waiting = 0;
  if (std::sscanf(buf, "%llu %llu", &running, &waiting) != 2) return -1;
  return static_cast<std::int64_t>(waiting);
}

// Idle and total time of the CPUs this process may run on, in ticks
// (/proc/stat), or nothing where it cannot be read.
struct CpuTimes {
  std::uint64_t idle = 0, total = 0;
  int cpus = 0;
};
std::optional<CpuTimes> cpu_times() {
#if defined(__linux__)
  static const cpu_set_t allowed = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(getpid(), sizeof set, &set) != 0)
      for (int i = 0; i < CPU_SETSIZE; ++i) CPU_SET(i, &set);
    return set;
  }();
  std::ifstream f("/proc/stat");
  CpuTimes t;
  for (std::string line; std::getline(f, line);) {
    unsigned cpu = 0;
    unsigned long long v[8] = {};
    if (std::sscanf(line.c_str(), "cpu%u %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &v[0], &v[1], &v[2],
                    &v[3], &v[4], &v[5], &v[6], &v[7]) != 9 ||
        cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed))
      continue;
    t.idle += v[3] + v[4];  // idle, iowait
    for (const auto x : v) t.total += x;
    ++t.cpus;
  }
  if (t.cpus == 0) return std::nullopt;
  return t;
#else
  return std::nullopt;
#endif
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// A sleep on a 32-bit word until another thread changes it and wakes us.
void wait_while_equal(std::atomic<std::uint32_t>& word, std::uint32_t value) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, value, nullptr, nullptr, 0);
#else
  word.wait(value);
#endif
}
void wake_all(std::atomic<std::uint32_t>& word) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, 0x7fffffff, nullptr,
          nullptr, 0);
#else
  word.notify_all();
#endif
}

// A range word: generation (20 bits) | hi (22 bits) | lo (22 bits). A job
// gives each thread of the team a range of items, like a static schedule:
// its owner claims [lo, hi) from the front (lo++), in order, so the kernel's
// prefetch runs on into the next item's weights and the claims stay in the
// owner's cache. A thread whose own range is empty steals from the back of
// another's (--hi): so the running threads take the work of a thread the OS
// descheduled. A compare-and-swap that names the generation cannot claim an
// item of a job other than the one it read.
constexpr int kSideBits = 22;
constexpr std::uint64_t kSideMask = (std::uint64_t{1} << kSideBits) - 1;
constexpr std::uint64_t kGenMask = (std::uint64_t{1} << (64 - 2 * kSideBits)) - 1;
constexpr std::int64_t kMaxItems = static_cast<std::int64_t>(kSideMask);

constexpr std::uint64_t make_word(std::uint64_t gen, std::uint64_t hi, std::uint64_t lo) {
  return (gen << (2 * kSideBits)) | (hi << kSideBits) | lo;
}
constexpr std::uint64_t gen_of(std::uint64_t w) {
  return w >> (2 * kSideBits);
}
constexpr std::uint64_t hi_of(std::uint64_t w) {
  return (w >> kSideBits) & kSideMask;
}
constexpr std::uint64_t lo_of(std::uint64_t w) {
  return w & kSideMask;
}

struct Counters {
  std::atomic<std::int64_t> jobs{0}, solo_jobs{0}, stalls{0}, stall_ns{0}, contended{0};
};
Counters& counters() {
  static Counters c;
  return c;
}

thread_local bool t_in_team = false;  // a helper, or a caller inside team_run: nested calls run inline

class Team {
 public:
  explicit Team(int helpers)
      : ranges_(static_cast<std::size_t>(helpers) + 1), schedstat_fd_(open_schedstat()) {  // the caller's
    threads_.reserve(static_cast<std::size_t>(helpers));
    for (int i = 0; i < helpers; ++i)
      threads_.emplace_back([this, i] { helper(static_cast<std::size_t>(i) + 1); });
  }
  ~Team() {
    stop_.store(true, std::memory_order_seq_cst);
    wake_.fetch_add(1, std::memory_order_seq_cst);
    wake_all(wake_);
    for (auto& t : threads_) t.join();
    if (schedstat_fd_ >= 0) ::close(schedstat_fd_);
  }
  Team(const Team&) = delete;
  Team& operator=(const Team&) = delete;

  int helpers() const { return static_cast<int>(threads_.size()); }

  void run(std::int64_t n, TeamItem item, const void* context) noexcept {
    auto& c = counters();
    c.jobs.fetch_add(1, std::memory_order_relaxed);
    const auto start = Clock::now();
    const bool alone = solo_ ? start < solo_until_ || !cores_freed(start)
                             : (!window_open_ || start >= window_start_ + kWindow) && window_contended(start);
    if (alone) {
      c.solo_jobs.fetch_add(1, std::memory_order_relaxed);
      for (std::int64_t i = 0; i < n; ++i) item(context, i);
      return;
    }
    gen_ = (gen_ + 1) & kGenMask;
    job_.item = item;
    job_.context = context;
    job_.done.store(0, std::memory_order_relaxed);
    // The helpers' ranges first: each helper starts when it sees its own.
    const auto parts = static_cast<std::int64_t>(ranges_.size());
    for (std::int64_t t = parts - 1; t >= 0; --t)
      ranges_[static_cast<std::size_t>(t)].word.store(
          make_word(gen_, static_cast<std::uint64_t>(n * (t + 1) / parts),
                    static_cast<std::uint64_t>(n * t / parts)),
          std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_seq_cst) > 0) {
      wake_.fetch_add(1, std::memory_order_seq_cst);
      wake_all(wake_);
    }
    const std::int64_t mine = work(0, gen_);
    const auto theirs = static_cast<std::uint32_t>(n - mine);
    if (job_.done.load(std::memory_order_acquire) == theirs) return;
    // A helper holds an item it started: wait for it, spinning while a
    // running helper would finish, then asleep.
    const auto waited_from = Clock::now();
    const auto limit = waited_from + kStallMargin + (waited_from - start);
    for (int k = 1; job_.done.load(std::memory_order_acquire) != theirs; ++k) {
      cpu_relax();
      if ((k & 255) == 0 && Clock::now() > limit) {
        caller_waiting_.store(true, std::memory_order_seq_cst);
        for (std::uint32_t d; (d = job_.done.load(std::memory_order_seq_cst)) != theirs;)
          wait_while_equal(job_.done, d);
        caller_waiting_.store(false, std::memory_order_relaxed);
        stalled(waited_from);
        return;
      }
    }
  }

 private:
  struct Job {
    TeamItem item = nullptr;
    const void* context = nullptr;
    std::atomic<std::uint32_t> done{0};  // items the helpers finished
  };
  struct alignas(64) Range {  // a line of its own: its owner's claims stay in its cache
    std::atomic<std::uint64_t> word{0};
  };

  // Thread `self` runs what it can claim of job `gen`: its own range from the
  // front, then the others' from the back. Returns the items it ran. A
  // successful claim means the job is unfinished (it waits for this item),
  // so job_ still holds it.
  std::int64_t work(std::size_t self, std::uint64_t gen) {
    std::int64_t ran = 0;
    const bool helper = self != 0;
    const auto run_one = [&](std::uint64_t i) {
      job_.item(job_.context, static_cast<std::int64_t>(i));
      ++ran;
      if (helper) {
        job_.done.fetch_add(1, std::memory_order_seq_cst);
        if (caller_waiting_.load(std::memory_order_seq_cst)) wake_all(job_.done);
      }
    };
    auto& own = ranges_[self].word;
    for (std::uint64_t w = own.load(std::memory_order_acquire); gen_of(w) == gen && lo_of(w) < hi_of(w);) {
      if (own.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        run_one(lo_of(w));
        w = own.load(std::memory_order_acquire);
      }
    }
    for (std::size_t k = 1; k < ranges_.size(); ++k) {
      auto& other = ranges_[(self + k) % ranges_.size()].word;
      for (std::uint64_t w = other.load(std::memory_order_acquire);
           gen_of(w) == gen && lo_of(w) < hi_of(w);) {
        const std::uint64_t claimed = w - (std::uint64_t{1} << kSideBits);
        if (other.compare_exchange_weak(w, claimed, std::memory_order_acq_rel, std::memory_order_acquire)) {
          run_one(hi_of(claimed));
          w = other.load(std::memory_order_acquire);
        }
      }
    }
    return ran;
  }

  // A helper was preempted holding an item: count the wait.
  void stalled(Clock::time_point waited_from) {
    const auto now = Clock::now();
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - waited_from).count();
    auto& c = counters();
    c.stalls.fetch_add(1, std::memory_order_relaxed);
    c.stall_ns.fetch_add(ns, std::memory_order_relaxed);
    window_stall_ns_ += ns;
  }

  // Run alone from `now` until the cores free up.
  void back_off(Clock::time_point now) {
    solo_ = true;
    solo_until_ = now + kRecheck;
    idle_at_ = cpu_times();
    window_open_ = false;
  }

  // Alone, at the end of a recheck: whether enough of the cores sat idle
  // since the last one to run as a team again; else the next recheck.
  bool cores_freed(Clock::time_point now) {
    const auto times = cpu_times();
    bool freed = !times || !idle_at_;  // unreadable: try the team again
    if (times && idle_at_ && times->total > idle_at_->total) {
      const double idle_cores = static_cast<double>(times->idle - idle_at_->idle) /
                                static_cast<double>(times->total - idle_at_->total) * times->cpus;
      freed = idle_cores >= kFreeCore * static_cast<double>(threads_.size());
    }
    if (freed) {
      solo_ = false;
      return true;
    }
    idle_at_ = times;
    solo_until_ = now + kRecheck;
    return false;
  }

  // At the end of a window: whether stalls and the caller's own run-queue
  // wait took more than kLostShare of it (then a back-off starts). Opens the
  // next window.
  bool window_contended(Clock::time_point now) {
    const std::int64_t waited = run_queue_wait_ns(schedstat_fd_);
    const bool judge = window_open_;
    const double wall_ns = std::chrono::duration<double, std::nano>(now - window_start_).count();
    double lost = static_cast<double>(window_stall_ns_);
    if (waited >= 0 && last_waited_ >= 0) lost += static_cast<double>(waited - last_waited_);
    last_waited_ = waited;
    window_stall_ns_ = 0;
    window_open_ = true;
    window_start_ = now;
    if (!judge || lost <= kLostShare * wall_ns) return false;
    counters().contended.fetch_add(1, std::memory_order_relaxed);
    back_off(now);
    return true;
  }

  void helper(std::size_t self) {
    pthread_setname_np(pthread_self(), "specdec-team");
    t_in_team = true;
    auto& own = ranges_[self].word;
    std::uint64_t seen = gen_of(own.load(std::memory_order_acquire));
    while (true) {
      std::uint64_t w = own.load(std::memory_order_acquire);
      auto spin_until = Clock::now() + kHelperSpin;
      for (int k = 1; gen_of(w) == seen; ++k) {
        if (stop_.load(std::memory_order_relaxed)) return;
        cpu_relax();
        if ((k & 255) == 0 && Clock::now() > spin_until) {
          const std::uint32_t ticket = wake_.load(std::memory_order_seq_cst);
          sleeping_.fetch_add(1, std::memory_order_seq_cst);
          if (gen_of(own.load(std::memory_order_seq_cst)) == seen && !stop_.load(std::memory_order_seq_cst))
            wait_while_equal(wake_, ticket);
          sleeping_.fetch_sub(1, std::memory_order_seq_cst);
          spin_until = Clock::now() + kHelperSpin;
        }
        w = own.load(std::memory_order_acquire);
      }
      seen = gen_of(w);
      work(self, seen);
    }
  }

  // The job being run. Jobs follow each other (run returns when every item
  // is done), so a helper that sees a range of this generation reads this job.
  Job job_;
  std::vector<Range> ranges_;                // [0] the caller's, then each helper's
  std::atomic<std::uint32_t> wake_{0};       // helpers sleep on it
  std::atomic<int> sleeping_{0};             // helpers asleep or about to be
  std::atomic<bool> caller_waiting_{false};  // the caller sleeps on job_.done
  std::atomic<bool> stop_{false};
  std::uint64_t gen_ = 0;             // the caller's: the last job published
  bool solo_ = false;                 // running alone after contention
  Clock::time_point solo_until_{};    // the next recheck of the cores
  std::optional<CpuTimes> idle_at_;   // the cores' times at the last one
  int schedstat_fd_ = -1;             // the caller's schedstat
  std::int64_t last_waited_ = -1;     // its run-queue wait at the window's start
  std::int64_t window_stall_ns_ = 0;  // the window's stalls
  bool window_open_ = false;
  Clock::time_point window_start_{};
  std::vector<std::thread> threads_;  // last: they start with everything above built
};

Team* team_for(int threads) {
  thread_local std::unique_ptr<Team> team;
  if (threads <= 1) return nullptr;
  if (!team || team->helpers() != threads - 1) {
    team.reset();
    team = std::make_unique<Team>(threads - 1);
  }
  return team.get();
}

int cgroup_quota_cores() {
  // cgroup v2: "max 100000" or "<quota> <period>".
  std::ifstream f("/sys/fs/cgroup/cpu.max");
  std::string quota;
  double period = 0;
  if (!(f >> quota >> period) || quota == "max" || period <= 0) return 0;
  try {
    return std::max(1, static_cast<int>(std::ceil(std::stod(quota) / period)));
  } catch (...) {
    return 0;
  }
}

}  // namespace

int available_cores() {
  static const int cores = [] {
    int n = 0;
#if defined(__linux__)
    // The process's (its main thread's) affinity, not the caller's: a thread
    // pinned to one core (DuoDecoding's) must not decide for the process.
    cpu_set_t set;
    if (sched_getaffinity(getpid(), sizeof set, &set) == 0) n = CPU_COUNT(&set);
#endif
    if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (const int quota = cgroup_quota_cores(); quota > 0) n = std::min(n, quota);
    return n;
  }();
  return cores;
}

namespace {
thread_local int t_forward_threads = 0;
std::atomic<int> g_default_forward_threads{0};

void check_thread_count(int n, const char* what) {
  if (n < 0)
    throw InvalidArgumentError(
        fmt::format("{}: {} threads (give a count >= 1, or 0 for the default)", what, n));
}
}  // namespace

int forward_threads() {
  int n = t_forward_threads;
  if (n == 0) n = g_default_forward_threads.load(std::memory_order_relaxed);
  const int cores = available_cores();
  return n == 0 ? cores : std::min(n, cores);
}

void set_forward_threads(int n) {
  check_thread_count(n, "set_forward_threads");
  t_forward_threads = n;
}

void set_default_forward_threads(int n) {
  check_thread_count(n, "set_default_forward_threads");
  g_default_forward_threads.store(n, std::memory_order_relaxed);
}

ContentionStats contention_stats() {
  const auto& c = counters();
  ContentionStats s;
  s.jobs = c.jobs.load(std::memory_order_relaxed);
  s.solo_jobs = c.solo_jobs.load(std::memory_order_relaxed);
  s.stalls = c.stalls.load(std::memory_order_relaxed);
  s.stall_seconds = static_cast<double>(c.stall_ns.load(std::memory_order_relaxed)) * 1e-9;
  s.contended = c.contended.load(std::memory_order_relaxed);
  return s;
}

void reset_contention_stats() {
  auto& c = counters();
  c.jobs = 0;
  c.solo_jobs = 0;
  c.stalls = 0;
  c.stall_ns = 0;
  c.contended = 0;
}

void team_run(std::int64_t n, TeamItem item, const void* context) {
  if (n <= 0) return;
  Team* team = n == 1 || t_in_team ? nullptr : team_for(forward_threads());
  if (team == nullptr) {
    for (std::int64_t i = 0; i < n; ++i) item(context, i);
    return;
  }
  if (n > kMaxItems) {  // more items than the job word holds: whole ranges as items
    struct Ranges {
      std::int64_t n, per;
      TeamItem item;
      const void* context;
    } r{n, (n + kMaxItems - 1) / kMaxItems, item, context};
    team_run((n + r.per - 1) / r.per,
             [](const void* c, std::int64_t i) {
               const auto& rr = *static_cast<const Ranges*>(c);
               for (std::int64_t j = i * rr.per; j < std::min(rr.n, (i + 1) * rr.per); ++j)
                 rr.item(rr.context, j);
             },
             &r);
    return;
  }
  t_in_team = true;
  team->run(n, item, context);
  t_in_team = false;
}

}  // namespace specdec::cpu
