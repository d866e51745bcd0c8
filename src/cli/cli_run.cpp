// cli_run.cpp — `pstate run`: a torchrun-style local launcher.
//
//   pstate run -n N [--nnodes M --node-rank K --master HOST:PORT] [--] PROGRAM [ARGS...]
//
// Starts N copies of PROGRAM with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
// MASTER_ADDR, MASTER_PORT (a free loopback port, or --master) and PSTATE_JOB_TOKEN (kept from
// the environment when set, else fresh random bytes) set, so pstate_init(env://) needs nothing
// else. Every line a rank prints is prefixed "[RANK] " (stdout to stdout, stderr to stderr). When
// a rank exits non-zero or dies of a signal, the others get SIGTERM, then SIGKILL after a grace
// period, and the launcher exits with that rank's status (128 + signal for a signal), naming the
// rank. SIGINT/SIGTERM to the launcher stop every rank the same way.
#include "cli/cli.hpp"
#include "common/error.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace pstate::cli {
namespace {

constexpr OptionSpec kOptions[] = {
    {"-n", "N", "ranks to start on this node (also --nproc-per-node)"},
    {"--nproc-per-node", "N", "same as -n"},
    {"--nnodes", "M", "nodes in the job (default 1); global ranks are node-major"},
    {"--node-rank", "K", "this node's index, 0..M-1 (default 0)"},
    {"--master", "HOST:PORT", "rendezvous address (default 127.0.0.1 and a free port; required with --nnodes > 1)"},
    {"--grace-ms", "MS", "after a failure, how long the other ranks get between SIGTERM and SIGKILL (default 3000)"},
    {"--no-prefix", nullptr, "do not prefix output lines with the rank"},
    {"--bind-cores", nullptr, "pin local rank i to CPU i % (CPUs available), even when ranks outnumber CPUs"},
    {"--no-bind", nullptr, "do not pin ranks (default: pinned one per CPU when they fit, as mpirun does)"},
};

constexpr CommandSpec kSpec = {
    "run",
    "start N ranks of a program with the torchrun environment",
    "-n N [--nnodes M --node-rank K --master HOST:PORT] [--] PROGRAM [ARGS...]",
    "Starts N processes of PROGRAM with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,\n"
    "MASTER_ADDR, MASTER_PORT and PSTATE_JOB_TOKEN set for pstate_init(env://). Output lines are\n"
    "prefixed with the rank. If a rank fails or dies, the others are stopped and pstate run exits\n"
    "with that rank's status (128+signal when killed), naming it. Ctrl-C stops every rank.",
    kOptions,
    true,
    true,
};

volatile sig_atomic_t g_stop_signal = 0;  // set by the signal handler only (async-signal-safe)
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  int pid_fd = -1;  // pidfd_open(pid): readable once the rank exits, so the launcher's poll wakes
                    // then (and not up to one poll timeout later); -1 where the kernel has none
  int out_fd = -1, err_fd = -1;
  std::string out_buf, err_buf;
  bool exited = false;
  int status = 0;
};

int free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw_error(PSTATE_ERR_TRANSPORT, "socket: ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) != 0) {
    ::close(fd);
    throw_error(PSTATE_ERR_TRANSPORT, "cannot find a free port on 127.0.0.1: ", std::strerror(errno));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string random_token() {
  std::array<unsigned char, 16> bytes{};
  FILE *f = std::fopen("/dev/urandom", "rb");
  if (f == nullptr || std::fread(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    if (f) std::fclose(f);
    throw_error(PSTATE_ERR_INTERNAL, "cannot read /dev/urandom for a job token");
  }
  std::fclose(f);
  std::string hex;
  char two[3];
  for (unsigned char b : bytes) {
    std::snprintf(two, sizeof two, "%02x", b);
    hex += two;
  }
  return hex;
}

void write_all(int fd, const std::string &s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// Emits every complete line of buf with the prefix; with `flush`, the rest too.
void emit_lines(std::string &buf, const std::string &prefix, int fd, bool flush) {
  size_t start = 0, nl;
  std::string out;
  while ((nl = buf.find('\n', start)) != std::string::npos) {
    out += prefix;
    out.append(buf, start, nl - start + 1);
    start = nl + 1;
  }
  buf.erase(0, start);
  if (flush && !buf.empty()) {
    out += prefix + buf + "\n";
    buf.clear();
  }
  write_all(fd, out);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return cat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return cat("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  return "stopped";
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitFailure;
}

// The CPUs this launcher may use, in order (its affinity mask).
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

pid_t spawn(const std::vector<std::string> &argv, const std::vector<std::pair<std::string, std::string>> &env,
            int out_w, int err_w, int close_a, int close_b, int cpu) {
  pid_t pid = ::fork();
  if (pid < 0) throw_error(PSTATE_ERR_INTERNAL, "fork: ", std::strerror(errno));
  if (pid > 0) return pid;
  // Child: default signal dispositions, own stdout/stderr pipes, the rank's environment.
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  ::dup2(out_w, STDOUT_FILENO);
  ::dup2(err_w, STDERR_FILENO);
  ::close(close_a);
  ::close(close_b);
  ::close(out_w);
  ::close(err_w);
  for (const auto &[k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    ::sched_setaffinity(0, sizeof set, &set);
  }
  std::vector<char *> args;
  for (const auto &a : argv) args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  std::fprintf(stderr, "pstate run: cannot execute %s: %s\n", args[0], std::strerror(errno));
  ::_exit(127);
}

class Launcher {
 public:
  Launcher(int nproc, int nnodes, int node_rank, std::string addr, int port, int grace_ms, bool prefix,
           bool bind_cores)
      : nproc_(nproc), nnodes_(nnodes), node_rank_(node_rank), addr_(std::move(addr)), port_(port),
        grace_ms_(grace_ms), prefix_(prefix) {
    if (bind_cores) cpus_ = allowed_cpus();
  }

  int run(const std::vector<std::string> &program) {
    const char *token_env = std::getenv("PSTATE_JOB_TOKEN");
    std::string token = token_env != nullptr && *token_env ? token_env : random_token();
    if (nnodes_ > 1 && (token_env == nullptr || !*token_env))
      std::fprintf(stderr, "pstate run: warning: PSTATE_JOB_TOKEN is not set; with --nnodes > 1 every node must "
                           "export the same token, or the store will refuse the other nodes\n");
    int world = nproc_ * nnodes_;
    for (int local = 0; local < nproc_; ++local) {
      int out[2], err[2];
      if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
        throw_error(PSTATE_ERR_INTERNAL, "pipe: ", std::strerror(errno));
      Rank r;
      r.rank = node_rank_ * nproc_ + local;
      std::vector<std::pair<std::string, std::string>> env = {
          {"RANK", std::to_string(r.rank)},        {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(local)},   {"LOCAL_WORLD_SIZE", std::to_string(nproc_)},
          {"GROUP_RANK", std::to_string(node_rank_)}, {"MASTER_ADDR", addr_},
          {"MASTER_PORT", std::to_string(port_)},  {"PSTATE_JOB_TOKEN", token}};
      int cpu = cpus_.empty() ? -1 : cpus_[static_cast<size_t>(local) % cpus_.size()];
      r.pid = spawn(program, env, out[1], err[1], out[0], err[0], cpu);
      ::close(out[1]);
      ::close(err[1]);
      r.out_fd = out[0];
      r.err_fd = err[0];
      r.pid_fd = static_cast<int>(::syscall(SYS_pidfd_open, r.pid, 0));
      ranks_.push_back(std::move(r));
    }
    return supervise();
  }

 private:
  std::string prefix_of(const Rank &r) const { return prefix_ ? cat("[", r.rank, "] ") : std::string(); }

  // Forwards what the ranks wrote; returns after at most timeout_ms, at once when a rank exits
  // (its pidfd is in the poll set; a rank closes its pipes a moment before it can be reaped, so
  // waiting for the pipes alone left the launcher asleep for a whole timeout at the end of most
  // jobs: `pstate run` of 8 short ranks took 89 or 139 ms, bimodally).
  void pump_output(int timeout_ms) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Rank *, bool>> owners;  // (rank, is_stderr)
    for (auto &r : ranks_) {
      if (r.out_fd >= 0) fds.push_back({r.out_fd, POLLIN, 0}), owners.push_back({&r, false});
      if (r.err_fd >= 0) fds.push_back({r.err_fd, POLLIN, 0}), owners.push_back({&r, true});
    }
    const size_t pipes = fds.size();
    for (auto &r : ranks_)
      if (r.pid_fd >= 0 && !r.exited) fds.push_back({r.pid_fd, POLLIN, 0});
    if (fds.empty()) {
      if (timeout_ms > 0) ::usleep(static_cast<useconds_t>(timeout_ms) * 1000);
      return;
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
    char buf[65536];
    for (size_t i = 0; i < pipes; ++i) {
      if (fds[i].revents == 0) continue;
      auto [r, is_err] = owners[i];
      int &fd = is_err ? r->err_fd : r->out_fd;
      std::string &acc = is_err ? r->err_buf : r->out_buf;
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0) {
        acc.append(buf, static_cast<size_t>(n));
        emit_lines(acc, prefix_of(*r), is_err ? STDERR_FILENO : STDOUT_FILENO, false);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        emit_lines(acc, prefix_of(*r), is_err ? STDERR_FILENO : STDOUT_FILENO, true);
        ::close(fd);
        fd = -1;
      }
    }
  }

  // Reaps exited ranks; returns the first that failed (or nullptr).
  Rank *reap() {
    Rank *failed = nullptr;
    for (auto &r : ranks_) {
      if (r.exited) continue;
      int status = 0;
      pid_t p = ::waitpid(r.pid, &status, WNOHANG);
      if (p == r.pid) {
        r.exited = true;
        r.status = status;
        if (r.pid_fd >= 0) ::close(r.pid_fd);
        r.pid_fd = -1;
        if ((!WIFEXITED(status) || WEXITSTATUS(status) != 0) && failed == nullptr) failed = &r;
      }
    }
    return failed;
  }

  bool all_exited() const {
    for (const auto &r : ranks_)
      if (!r.exited) return false;
    return true;
  }

  void signal_all(int sig) {
    for (auto &r : ranks_)
      if (!r.exited) ::kill(r.pid, sig);
  }

  // SIGTERM, grace period (still pumping output), then SIGKILL.
  void stop_all() {
    signal_all(SIGTERM);
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms_);
    while (!all_exited() && std::chrono::steady_clock::now() < until) {
      pump_output(20);
      reap();
    }
    if (!all_exited()) {
      signal_all(SIGKILL);
      while (!all_exited()) {
        pump_output(20);
        reap();
      }
    }
    drain();
  }

  void drain() {
    for (int i = 0; i < 50; ++i) {
      bool open = false;
      for (auto &r : ranks_) open = open || r.out_fd >= 0 || r.err_fd >= 0;
      if (!open) break;
      pump_output(20);
    }
  }

  int supervise() {
    while (true) {
      pump_output(50);
      if (g_stop_signal != 0) {
        std::fprintf(stderr, "pstate run: got signal %d, stopping all ranks\n", static_cast<int>(g_stop_signal));
        stop_all();
        return 128 + g_stop_signal;
      }
      if (Rank *failed = reap()) {
        int code = exit_code_of(failed->status);
        std::string why = describe_status(failed->status);
        int rank = failed->rank;
        drain();
        std::fprintf(stderr, "pstate run: rank %d %s; stopping the other ranks\n", rank, why.c_str());
        stop_all();
        std::fprintf(stderr, "pstate run: failed: rank %d %s\n", rank, why.c_str());
        return code == 0 ? kExitFailure : code;
      }
      if (all_exited()) {
        drain();
        return kExitOk;
      }
    }
  }

  int nproc_, nnodes_, node_rank_;
  std::string addr_;
  int port_, grace_ms_;
  bool prefix_;
  std::vector<int> cpus_;  // --bind-cores: local rank i runs on cpus_[i % size]
  std::vector<Rank> ranks_;
};

int run_run(const ParsedArgs &args) {
  int nproc = args.int_value("-n", args.int_value("--nproc-per-node", 0));
  if (nproc < 1 || nproc > 4096) throw UsageError("-n N is required (1..4096 ranks per node)");
  int nnodes = args.int_value("--nnodes", 1);
  int node_rank = args.int_value("--node-rank", 0);
  if (nnodes < 1) throw UsageError("--nnodes must be >= 1");
  if (node_rank < 0 || node_rank >= nnodes) throw UsageError("--node-rank must be in 0..nnodes-1");
  int grace = args.int_value("--grace-ms", 3000);
  if (grace < 0) throw UsageError("--grace-ms must be >= 0");
  if (args.positional().empty()) throw UsageError("PROGRAM is missing: pstate run -n N -- PROGRAM [ARGS...]");

  std::string addr = "127.0.0.1";
  int port = 0;
  if (auto master = args.value("--master")) {
    auto colon = master->rfind(':');
    if (colon == std::string::npos || colon == 0) throw UsageError("--master must be HOST:PORT");
    addr = master->substr(0, colon);
    if (addr.size() > 2 && addr.front() == '[' && addr.back() == ']') addr = addr.substr(1, addr.size() - 2);
    port = std::atoi(master->c_str() + colon + 1);
    if (port <= 0 || port > 65535) throw UsageError("--master port must be 1..65535");
  } else if (nnodes > 1) {
    throw UsageError("--master HOST:PORT is required with --nnodes > 1 (the address of node 0)");
  } else {
    port = free_loopback_port();
  }

  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  // Like mpirun's default, ranks that fit on the CPUs get one each: left alone, the scheduler
  // often stacks two ranks of a shared-memory group on one core, and every hand-off between them
  // then costs a context switch.
  if (args.flag("--bind-cores") && args.flag("--no-bind")) throw UsageError("--bind-cores and --no-bind exclude each other");
  bool bind = args.flag("--bind-cores") ||
              (!args.flag("--no-bind") && static_cast<size_t>(nproc) <= allowed_cpus().size());
  Launcher launcher(nproc, nnodes, node_rank, addr, port, grace, !args.flag("--no-prefix"), bind);
  return launcher.run(args.positional());
}

}  // namespace

const Subcommand &run_subcommand() {
  static const Subcommand sub{kSpec, run_run};
  return sub;
}

}  // namespace pstate::cli
