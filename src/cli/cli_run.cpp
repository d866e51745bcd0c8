// cli_run.cpp — `pstate run`: a torchrun-style local launcher.
//
//   pstate run -n N [--nnodes M --node-rank K --master HOST:PORT] [--] PROGRAM [ARGS...]
//
// Starts N copies of PROGRAM with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
// MASTER_ADDR, MASTER_PORT (a free loopback port, or --master), PSTATE_JOB_TOKEN (kept from the
// environment when set, else fresh random bytes) and PSTATE_JOB_ID (kept when set, else derived
// from the token, so every node of a job agrees) set, so pstate_init(env://) needs nothing else.
// Every line a rank prints is prefixed "[RANK] " (stdout to stdout, stderr to stderr), but for
// pstate's JSON log lines (PSTATE_LOG_FORMAT=json), which name their rank; the launcher's own
// lines ("pstate run: ...") are JSON log lines too then (say_line).
//
// When a rank exits non-zero or dies of a signal, the launcher names that rank first — the
// earliest to end badly, and how (signal or exit status): a rank that ends in the same instant
// after a killed one is its consequence, so a death by signal ranks before an exit status then —
// and lets the others finish reporting what they saw (they usually fail at once with PEER_LOST):
// they get --grace-ms to exit on their own, then SIGTERM, then SIGKILL --grace-ms later. It exits
// with the first rank's status (128 + signal for a signal) and sums up how every rank ended.
// When some ranks exited 0 and others still run (one hung in user code), it says every
// --status-every seconds which ranks it waits for (pid, time since their last output); with
// --max-wait S it stops them S seconds after the first rank exited 0 and exits 124, naming them.
// SIGINT/SIGTERM to the launcher stop every rank at once (SIGTERM, then SIGKILL).
// Before it stops ranks (a rank failed, --max-wait, SIGINT/SIGTERM) it asks every live rank for its
// flight-recorder dump through the job's store (job_store_client.hpp; each pstate context answers
// from a thread of its own, group/dump_watcher.hpp), waits up to 2 s for the dumps of the ranks
// connected to the store, and says where the job's dumps are and the `pstate doctor` command that
// reads them. It sends no signal for it (asking must not disturb: SIGUSR1 ended a process that had
// no handler, and interrupted the system calls of the program's threads in one that had);
// --dump-signal sends SIGUSR1 as well, and sets PSTATE_TRACE_SIGNAL=1 in the ranks so that pstate
// installs its handler. Once every rank has ended it removes the /dev/shm names its job's ranks
// left (a rank killed while a peer had yet to attach to a segment it made leaves the name: the
// signal runs none of its code), by the job's id, never another job's (job_store_client.hpp).
// The job's rendezvous store is served by the launcher of node 0 itself (as torchrun's agent
// does), not by rank 0: it listens before any rank starts (on the --master address, or a free
// loopback port it binds, so no other process can take that port in between) and lives until
// the last rank ended, so the store outlives any rank (PSTATE_STORE_EXTERNAL=1 tells the ranks).
// --metrics [HOST:]PORT serves one Prometheus endpoint for this node's ranks (cli/job_metrics.hpp).
// --rank0-store leaves it to rank 0, as without a launcher. --keep-going leaves the other ranks
// running when one fails (for jobs that survive a dead rank), naming each failure as it happens;
// --respawn K also starts a replacement for each failed rank (same RANK, PSTATE_REJOIN=1: its
// pstate_init waits until the survivors admit it with pstate_grow), at most K in all.
//
// CPUs (place_ranks): the ranks run only on the CPUs the launcher may use (its affinity, which
// taskset and the cgroup's cpuset set) and never on one another pstate job of the host pinned its
// ranks to: each CPU a job uses is claimed in a host-wide record that cannot go stale
// (cpu_claims.hpp: a lock per CPU that the kernel drops when the job's last process on that CPU
// ends, SIGKILL included). One free CPU per rank: each rank is pinned alone to one. Fewer: the
// ranks share the free ones (or, with none, the launcher's) unpinned, and get PSTATE_SPIN=0 so
// that their waits never spin on a CPU other ranks need; pstate run says so.
#include "bootstrap/crypto.hpp"
#include "bootstrap/init_method.hpp"
#include "bootstrap/tcp_store_server.hpp"
#include "bootstrap/wire.hpp"
#include "cli/cli.hpp"
#include "cli/cpu_claims.hpp"
#include "cli/job_metrics.hpp"
#include "cli/job_store_client.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "group/metrics_endpoint.hpp"
#include "transport/shm/shm_names.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace pstate::cli {
namespace {

constexpr OptionSpec kOptions[] = {
    {"-n", "N", "ranks to start on this node (also --nproc-per-node)"},
    {"--nproc-per-node", "N", "same as -n"},
    {"--nnodes", "M", "nodes in the job (default 1); global ranks are node-major"},
    {"--node-rank", "K", "this node's index, 0..M-1 (default 0)"},
    {"--master", "HOST:PORT", "rendezvous address (default 127.0.0.1 and a free port; required with --nnodes > 1)"},
    {"--grace-ms", "MS",
     "after a rank fails, how long the others get to report and exit on their own before SIGTERM, and again "
     "before SIGKILL (default 3000)"},
    {"--max-wait", "S", "once a rank has exited 0, stop the ranks still running after S more seconds (exit 124)"},
    {"--status-every", "S",
     "while some ranks exited 0 and others run, name the running ones every S seconds (default 10)"},
    {"--no-prefix", nullptr, "do not prefix output lines with the rank"},
    {"--bind-cores", nullptr,
     "pin local rank i to the i-th free CPU, in turn, even when ranks outnumber the free CPUs (free: in this "
     "launcher's affinity and not held by another pstate job of the host)"},
    {"--no-bind", nullptr,
     "do not pin ranks nor claim CPUs (default: one free CPU per rank when they fit, as mpirun does, claimed "
     "host-wide so that other pstate jobs pin elsewhere; ranks that share CPUs do not spin)"},
    {"--keep-going", nullptr,
     "when a rank fails, name it and leave the others running (default: stop them); the exit status is still "
     "the first failed rank's"},
    {"--respawn", "K",
     "when a rank fails, start a replacement with the same RANK and PSTATE_REJOIN=1 (the survivors admit it with "
     "pstate_grow), at most K times in all; implies --keep-going"},
    {"--store", "URL",
     "the job's store is URL, an etcd cluster (etcd://H1:2379,H2:2379,H3:2379/PREFIX) or any init method: the "
     "ranks get PSTATE_STORE=URL and no launcher serves a store, so the job outlives any host (with --nnodes, "
     "--master is then not needed)"},
    {"--rank0-store", nullptr,
     "rank 0 serves the rendezvous store (default: the launcher of node 0 does, so the store outlives any rank)"},
    {"--metrics", "[HOST:]PORT",
     "serve the Prometheus metrics of this node's ranks at http://HOST:PORT/metrics (every interface without "
     "HOST): each rank's series labelled rank and host, and pstate_rank_up; the ranks serve on 127.0.0.1 ports "
     "of their own (PSTATE_METRICS_ADDR=127.0.0.1:0 unless it is set)"},
    {"--dump-signal", nullptr,
     "ask for flight-recorder dumps with SIGUSR1 too, and set PSTATE_TRACE_SIGNAL=1 in the ranks (pstate installs "
     "its handler); a rank without the handler is ended by it (default: through the job's store only)"},
};

constexpr CommandSpec kSpec = {
    "run",
    "start N ranks of a program with the torchrun environment",
    "-n N [--nnodes M --node-rank K --master HOST:PORT] [--] PROGRAM [ARGS...]",
    "Starts N processes of PROGRAM with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,\n"
    "MASTER_ADDR, MASTER_PORT, PSTATE_JOB_TOKEN and PSTATE_JOB_ID set for pstate_init(env://). Output\n"
    "lines are prefixed with the rank. If a rank fails or dies, pstate run names it first (the\n"
    "earliest, and how), gives the others --grace-ms to report and exit, then stops them, and exits\n"
    "with that rank's status (128+signal when killed). A rank still running after the others exited\n"
    "is named every --status-every seconds; --max-wait ends such a job. Ctrl-C stops every rank.\n"
    "Before it stops ranks it asks them for their flight-recorder dumps through the job's store.",
    kOptions,
    true,
    true,
};

volatile sig_atomic_t g_stop_signal = 0;  // set by the signal handler only (async-signal-safe)
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

using Clock = std::chrono::steady_clock;

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  Clock::time_point last_output;  // start, or the last byte it wrote
  Clock::time_point ended;        // when the launcher saw it end
  int end_order = -1;             // 0 = the first rank seen to end, ...
  bool stopped = false;           // pstate run sent it SIGTERM/SIGKILL
  bool announced = false;         // --keep-going: its failure was reported
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

// With PSTATE_LOG_FORMAT=json a rank's pstate log lines are JSON objects that name their rank
// already: they are forwarded without the "[RANK] " prefix, so that each stays one JSON object.
bool is_json_log_line(const std::string &buf, size_t start) {
  static const std::string kStart = "{\"time\":";
  return log_format_from_env() == LogFormat::kJson && buf.compare(start, kStart.size(), kStart) == 0;
}

// Emits every complete line of buf with the prefix (JSON log lines without it); with `flush`,
// the rest too.
void emit_lines(std::string &buf, const std::string &prefix, int fd, bool flush) {
  size_t start = 0, nl;
  std::string out;
  while ((nl = buf.find('\n', start)) != std::string::npos) {
    if (!is_json_log_line(buf, start)) out += prefix;
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

// pstate run's own lines: "pstate run: LINE" on stderr, whatever PSTATE_DEBUG says; with
// PSTATE_LOG_FORMAT=json one JSON log line (common/log.hpp) whose message is that same text, rank
// null (the launcher is no rank), level ERROR for a failure ("failed: ...", "cannot ..."), WARN for
// a warning ("warning: ...", a signal), INFO for the rest.
void say_line(const std::string &line) {
  const std::string text = "pstate run: " + line;
  if (log_format_from_env() != LogFormat::kJson) return write_all(STDERR_FILENO, text + "\n");
  const auto starts = [&](const char *p) { return line.rfind(p, 0) == 0; };
  const char *level = starts("failed") || starts("cannot ") ? "ERROR"
                      : starts("warning: ") || starts("got signal ") ? "WARN"
                                                                      : "INFO";
  write_log_line(LogFormat::kJson, level, -1, LogFields{}, text);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return cat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return cat("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  return "stopped";
}

bool failed_status(int status) {
  return !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
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

// Starts argv with env added, its output into out_w/err_w, on `cpus` (empty: the launcher's
// affinity), inheriting `keep_fds` (the record's locks of those CPUs, cpu_claims.hpp: they stay
// claimed while the rank runs, even if the launcher is killed first).
pid_t spawn(const std::vector<std::string> &argv, const std::vector<std::pair<std::string, std::string>> &env,
            int out_w, int err_w, int close_a, int close_b, const std::vector<int> &cpus,
            const std::vector<int> &keep_fds) {
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
  if (!cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : cpus) CPU_SET(cpu, &set);
    ::sched_setaffinity(0, sizeof set, &set);
  }
  for (int fd : keep_fds) ::fcntl(fd, F_SETFD, 0);  // this child's descriptor only: not close-on-exec
  std::vector<char *> args;
  for (const auto &a : argv) args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  say_line(cat("cannot execute ", args[0], ": ", std::strerror(errno)));
  ::_exit(127);
}

// --bind-cores, the default, --no-bind.
enum class BindMode { kForce, kDefault, kNone };

// Where this launcher's ranks run and whether they spin (cpu_claims.hpp has the host-wide record).
struct Placement {
  std::vector<CpuClaim> claims;  // this job's CPUs, held for its life
  std::vector<int> pinned;       // local rank i runs alone on pinned[i % size] (empty: not pinned)
  std::vector<int> shared;       // else every rank runs on these (empty: the launcher's affinity)
  bool no_spin = false;          // the ranks share CPUs: PSTATE_SPIN=0, so their waits never spin

  std::vector<int> cpus_of(int local) const {
    if (!pinned.empty()) return {pinned[static_cast<size_t>(local) % pinned.size()]};
    return shared;
  }
  // The locks a rank inherits: those of the CPUs it runs on.
  std::vector<int> fds_of(int local) const {
    const std::vector<int> cpus = cpus_of(local);
    std::vector<int> fds;
    for (const auto &c : claims)
      if (std::find(cpus.begin(), cpus.end(), c.cpu()) != cpus.end()) fds.push_back(c.fd());
    return fds;
  }
};


bool info_enabled() { return Logger().enabled(LogLevel::kInfo); }

// "1 rank", "2 ranks"
std::string counted(size_t n, const char *noun) { return cat(n, " ", noun, n == 1 ? "" : "s"); }

// Places `nproc` ranks on the CPUs the launcher may use (its affinity: taskset, the cgroup's
// cpuset), never outside them and never on a CPU another pstate job of the host holds. With a
// free CPU per rank, each rank is pinned alone to one (and spins before it sleeps, as the library
// decides). With fewer, the ranks are not pinned one per CPU: they share the free CPUs this job
// claims (--bind-cores: pinned to them in turn), or, with none free, run where the launcher may
// among the other jobs' ranks, and never spin (PSTATE_SPIN=0), so that a wait does not take a CPU
// from a rank that has work. The job claims the CPUs it runs on even when its ranks outnumber
// them, so that no later job pins a spinning rank there. --no-bind claims nothing and pins nothing
// (the ranks run where the launcher may) but still turns spinning off when other jobs hold CPUs of
// its set or the ranks outnumber the free ones (said at INFO only: it asked for no placement).
Placement place_ranks(int nproc, BindMode mode, const std::string &holder) {
  Placement p;
  const std::vector<int> allowed = allowed_cpus();
  const size_t n = static_cast<size_t>(nproc);
  const std::string dir = cpu_claim_dir();
  const std::string mine = cat(allowed.size() == 1 ? "CPU " : "CPUs ", cpu_list_text(allowed));
  CpuSurvey s = claim_cpus(allowed, mode == BindMode::kNone ? 0 : n, holder);
  if (!s.unusable.empty()) {  // blind to other jobs: as if this were the host's only one
    say_line(cat("warning: cannot use the host-wide record of pinned CPUs (", s.unusable, "); ",
                 mode == BindMode::kNone ? "--no-bind: the ranks are not pinned" : "pinning as if this job were alone "
                                                                                  "on the host",
                 " (PSTATE_CPU_CLAIM_DIR names another directory)"));
    if (mode == BindMode::kForce || (mode == BindMode::kDefault && n <= allowed.size())) p.pinned = allowed;
    return p;
  }
  // ": CPU 0 (job run-ab12, pstate run pid 77) is held by another pstate job; " or ": "
  const std::string others =
      s.held.empty() ? std::string(": ")
                     : cat(": ", s.held_text, s.held.size() == 1 ? " is held by another pstate job; "
                                                                 : " are held by other pstate jobs; ");
  const std::string no_spin = cat(n == 1 ? "it does" : "they do", " not spin when ", n == 1 ? "it waits" : "they wait",
                                  " (PSTATE_SPIN=0)");
  if (mode == BindMode::kNone) {
    const size_t free = allowed.size() - s.held.size();
    if (free >= n) return p;
    p.no_spin = true;
    if (info_enabled())  // --no-bind asked for no placement: only at INFO
      say_line(cat(counted(n, "rank"), " (--no-bind) and ", counted(free, "free CPU"),
                   " of ", mine, " (this launcher's affinity)", others, no_spin));
    return p;
  }
  std::vector<int> cpus;
  for (const auto &c : s.claimed) cpus.push_back(c.cpu());
  p.claims = std::move(s.claimed);
  if (cpus.size() == n) {
    p.pinned = cpus;
    if (info_enabled())
      say_line(cat(n == 1 ? "the rank is pinned to CPU " : "the ranks are pinned one per CPU, in rank order, to CPUs ",
                   cpu_list_text(cpus), " (claimed in ", dir, " for the job's life)",
                   s.held.empty() ? std::string()
                                  : cat("; ", s.held_text, s.held.size() == 1 ? " is held by another pstate job"
                                                                              : " are held by other pstate jobs")));
    return p;
  }
  p.no_spin = true;
  const std::string ours = cat(cpus.size() == 1 ? "CPU " : "CPUs ", cpu_list_text(cpus));
  std::string where;
  if (cpus.empty()) {
    where = cat(n == 1 ? "the rank runs" : "the ranks run", " on ", mine, " among the other jobs' ranks");
  } else if (mode == BindMode::kForce) {
    p.pinned = cpus;
    where = cat("--bind-cores: the ranks are pinned to ", ours, " in turn (claimed in ", dir, ")");
  } else {
    p.shared = cpus;
    where = cat("the ranks share ", ours, " (claimed in ", dir, ")");
  }
  if (!s.held.empty() || info_enabled())
    say_line(cat(s.held.empty() ? "" : "warning: ", counted(n, "rank"), " and ", counted(cpus.size(), "free CPU"), " of ",
                 mine, " (this launcher's affinity)", others, where, "; ", no_spin));
  return p;
}

class Launcher {
 public:
  Launcher(int nproc, int nnodes, int node_rank, std::string addr, int port, int grace_ms, int max_wait_s,
           int status_every_s, bool prefix, BindMode bind, bool host_store)
      : nproc_(nproc),
        nnodes_(nnodes),
        node_rank_(node_rank),
        addr_(std::move(addr)),
        port_(port),
        grace_ms_(grace_ms),
        max_wait_s_(max_wait_s),
        status_every_s_(status_every_s),
        prefix_(prefix),
        bind_(bind) {
    host_store_ = host_store;
  }
  void keep_going() { keep_going_ = true; }
  // --store URL: the job's store is URL (an etcd cluster); no launcher serves one.
  void external_store(std::string url) {
    store_url_ = std::move(url);
    host_store_ = false;
  }
  void dump_signal() { dump_signal_ = true; }
  // --metrics [HOST:]PORT (cli/job_metrics.hpp)
  void metrics(MetricsAddress at) { metrics_at_ = std::move(at), metrics_on_ = true; }
  void respawn(int max) {
    keep_going_ = true;
    max_respawns_ = max;
  }

  int run(const std::vector<std::string> &program) {
    job_started_ns_ = wall_ns() - 1000000;  // before any rank can dump
    const char *token_env = std::getenv("PSTATE_JOB_TOKEN");
    std::string token = token_env != nullptr && *token_env ? token_env : random_token();
    // The job id names this job in the store's refusals ("this store belongs to job ..."); derived
    // from the token, so the nodes of one job agree without being told, and the token stays secret.
    const char *job_id_env = std::getenv("PSTATE_JOB_ID");
    std::string job_id = job_id_env != nullptr && *job_id_env
                             ? job_id_env
                             : "run-" + crypto::to_hex(crypto::sha256(crypto::as_bytes(token))).substr(0, 12);
    if (nnodes_ > 1 && (token_env == nullptr || !*token_env))
      say_line("warning: PSTATE_JOB_TOKEN is not set; with --nnodes > 1 every node must export the same token, "
               "or the store will refuse the other nodes");
    int world = nproc_ * nnodes_;
    if (host_store_ && node_rank_ == 0) {  // node 0's launcher serves the store (head comment)
      StoreServerOptions so;
      so.host = addr_;
      so.port = port_;
      so.world_size = world;
      so.job_token = token;
      so.job_id = job_id;
      so.owner_rank = -1;
      store_ = TcpStoreServer::start(so, store_log_);
      port_ = store_->port();
    }
    token_ = token;
    job_id_ = job_id;
    program_ = program;
    placement_ = place_ranks(nproc_, bind_,
                             cat("job ", job_id_, nnodes_ > 1 ? cat(" node ", node_rank_) : std::string(),
                                 ", pstate run pid ", static_cast<long>(::getpid())));
    InitMethod store_method;
    store_method.kind = InitMethod::Kind::kTcp;
    store_method.host = addr_;
    store_method.port = port_;
    job_store_ = std::make_unique<JobStoreClient>(store_url_.empty() ? store_method.url() : store_url_, token_, job_id_);
    if (metrics_on_) start_metrics(store_url_.empty() ? store_method.url() : store_url_);
    for (int local = 0; local < nproc_; ++local) {
      ranks_.emplace_back();
      start_rank(ranks_.back(), local, false);
    }
    start_ = Clock::now();
    return supervise();
  }

 private:
  // Starts local rank `local` of this node into r (a replacement: PSTATE_REJOIN=1).
  void start_rank(Rank &r, int local, bool rejoin) {
    const int world = nproc_ * nnodes_;
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
      throw_error(PSTATE_ERR_INTERNAL, "pipe: ", std::strerror(errno));
    r = Rank{};
    r.rank = node_rank_ * nproc_ + local;
    std::vector<std::pair<std::string, std::string>> env = {{"RANK", std::to_string(r.rank)},
                                                            {"WORLD_SIZE", std::to_string(world)},
                                                            {"LOCAL_RANK", std::to_string(local)},
                                                            {"LOCAL_WORLD_SIZE", std::to_string(nproc_)},
                                                            {"GROUP_RANK", std::to_string(node_rank_)},
                                                            {"MASTER_ADDR", addr_},
                                                            {"MASTER_PORT", std::to_string(port_)},
                                                            {"PSTATE_JOB_TOKEN", token_},
                                                            {"PSTATE_JOB_ID", job_id_}};
    if (host_store_) env.push_back({"PSTATE_STORE_EXTERNAL", "1"});
    if (!store_url_.empty()) env.push_back({"PSTATE_STORE", store_url_});
    if (rejoin) env.push_back({"PSTATE_REJOIN", "1"});
    if (dump_signal_) env.push_back({"PSTATE_TRACE_SIGNAL", "1"});
    if (metrics_on_ && std::getenv("PSTATE_METRICS_ADDR") == nullptr) env.push_back({"PSTATE_METRICS_ADDR", "127.0.0.1:0"});
    if (placement_.no_spin) env.push_back({"PSTATE_SPIN", "0"});  // it shares its CPUs (place_ranks)
    r.pid = spawn(program_, env, out[1], err[1], out[0], err[0], placement_.cpus_of(local), placement_.fds_of(local));
    ::close(out[1]);
    ::close(err[1]);
    r.out_fd = out[0];
    r.err_fd = err[0];
    r.pid_fd = static_cast<int>(::syscall(SYS_pidfd_open, r.pid, 0));
    r.last_output = Clock::now();
  }

  // --respawn: every rank that failed (and whose pipes are drained) gets a replacement while the
  // budget lasts; a replaced failure no longer counts against the job.
  void respawn_failures() {
    for (size_t i = 0; i < ranks_.size(); ++i) {
      Rank &r = ranks_[i];
      if (!r.exited || r.stopped || !failed_status(r.status) || respawned_ >= max_respawns_) continue;
      if (r.out_fd >= 0 || r.err_fd >= 0) {  // its last words first
        pump_output(0);
        if (r.out_fd >= 0 || r.err_fd >= 0) continue;
      }
      ++respawned_;
      say(cat("rank ", r.rank, " ", describe_status(r.status), " at ", seconds_text(seconds_between(start_, r.ended)),
              "; --respawn: starting a replacement with RANK=", r.rank, " and PSTATE_REJOIN=1 (", respawned_, " of ",
              max_respawns_, "); the survivors admit it with pstate_grow"));
      start_rank(r, static_cast<int>(i), true);
    }
  }

  // --metrics: the launcher's endpoint; a scrape (the endpoint's thread) reads the ranks' keys
  // through a store connection of its own and fetches their texts (cli/job_metrics.hpp).
  void start_metrics(const std::string &store_url) {
    metrics_store_ = std::make_unique<JobStoreClient>(store_url, token_, job_id_);
    std::vector<int> ranks;
    for (int local = 0; local < nproc_; ++local) ranks.push_back(node_rank_ * nproc_ + local);
    metrics_ = std::make_unique<MetricsEndpoint>(metrics_at_.host, metrics_at_.port, [this, ranks] {
      std::lock_guard<std::mutex> lock(metrics_mutex_);
      std::vector<std::string> where(ranks.size());
      try {
        where = metrics_store_->metrics_endpoints(ranks, kStoreCallMs);
      } catch (const Error &) {  // the store is gone (the job ended) or busy: every rank is down
      }
      std::vector<std::string> addresses(ranks.size());
      std::vector<RankExposition> out(ranks.size());
      for (size_t i = 0; i < ranks.size(); ++i) {
        out[i].rank = ranks[i];
        const size_t space = where[i].find(' ');
        addresses[i] = where[i].substr(0, space);
        out[i].host = space == std::string::npos ? std::string() : where[i].substr(space + 1);
      }
      std::vector<std::string> texts = fetch_metrics(addresses, 2000);
      for (size_t i = 0; i < ranks.size(); ++i) {
        out[i].up = !texts[i].empty();
        out[i].text = std::move(texts[i]);
      }
      return merge_rank_metrics(out);
    });
    say(cat("metrics of this node's ranks at http://", metrics_->address(), "/metrics"));
  }

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
        r->last_output = Clock::now();
        acc.append(buf, static_cast<size_t>(n));
        emit_lines(acc, prefix_of(*r), is_err ? STDERR_FILENO : STDOUT_FILENO, false);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        emit_lines(acc, prefix_of(*r), is_err ? STDERR_FILENO : STDOUT_FILENO, true);
        ::close(fd);
        fd = -1;
      }
    }
  }

  // Reaps the ranks that ended and numbers them in the order they ended. Ranks seen ending in the
  // same pass are ordered death by signal first (nothing but the signal made it end; a rank that
  // exits with an error then was usually reacting to a peer that died), then by rank.
  void reap() {
    std::vector<Rank *> now;
    for (auto &r : ranks_) {
      if (r.exited) continue;
      int status = 0;
      pid_t p = ::waitpid(r.pid, &status, WNOHANG);
      if (p == r.pid) {
        r.exited = true;
        r.status = status;
        r.ended = Clock::now();
        if (r.pid_fd >= 0) ::close(r.pid_fd);
        r.pid_fd = -1;
        now.push_back(&r);
      }
    }
    std::stable_sort(now.begin(), now.end(),
                     [](const Rank *a, const Rank *b) { return WIFSIGNALED(a->status) && !WIFSIGNALED(b->status); });
    for (Rank *r : now) r->end_order = ended_++;
  }

  // The first rank, in end order, that failed (exit status != 0 or a signal), or nullptr.
  const Rank *root_cause() const {
    const Rank *first = nullptr;
    for (const auto &r : ranks_)
      if (r.exited && !r.stopped && failed_status(r.status) && (first == nullptr || r.end_order < first->end_order))
        first = &r;
    return first;
  }

  bool all_exited() const {
    for (const auto &r : ranks_)
      if (!r.exited) return false;
    return true;
  }

  void signal_all(int sig) {
    for (auto &r : ranks_)
      if (!r.exited) {
        ::kill(r.pid, sig);
        r.stopped = true;
      }
  }

  // The flight recorder's folder as the ranks see it (they inherit our working directory and
  // environment); empty when PSTATE_TRACE_ENTRIES=0 turned the recorder off.
  static std::string trace_dir() {
    const char *entries = std::getenv("PSTATE_TRACE_ENTRIES");
    if (entries != nullptr && std::strcmp(entries, "0") == 0) return "";
    const char *dir = std::getenv("PSTATE_TRACE_DIR");
    std::string d = dir != nullptr && *dir != '\0' ? dir : "pstate-trace";
    if (d.front() != '/') {
      char cwd[4096];
      if (::getcwd(cwd, sizeof cwd) != nullptr) d = cat(cwd, "/", d);
    }
    return d;
  }

  // When rank r's dump was last written (0: none).
  static int64_t dump_mtime_ns(const std::string &dir, int rank) {
    struct stat st;
    if (::stat(cat(dir, "/rank", rank, ".pstate-trace").c_str(), &st) != 0) return 0;
    return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  }

  static int64_t wall_ns() {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  }

  // Asks every rank for its dump through the job's store ("pstate run: <why>" becomes the dumps'
  // reason) and waits until each live rank connected to the store (one with a pstate context,
  // which answers) has written one or ended, at most 2 s (a stopped or wedged rank cannot answer).
  // A rank without pstate is not asked and not waited for. --dump-signal: SIGUSR1 to every live
  // rank too, and all of them are waited for. Once per job.
  void request_dumps(const std::string &why) {
    const std::string dir = trace_dir();
    if (dir.empty() || dumps_requested_) return;
    dumps_requested_ = true;
    const int64_t asked = wall_ns() - 1000000;  // file systems with coarse timestamps
    std::vector<int> connected;
    bool everyone = dump_signal_;
    try {
      job_store_->request_dumps(cat("pstate run: ", why), kStoreCallMs);
      try {
        connected = job_store_->members(kStoreCallMs);
      } catch (const Error &) {
        everyone = true;  // cannot tell who answers: wait for every live rank (at most the 2 s)
      }
    } catch (const Error &e) {
      // A job that failed at its start (a rank refused or gave up) has a store that answers every
      // request with that failure, which the ranks have reported already: no need to repeat it.
      const bool failed_start = std::string_view(e.what()).rfind(wire::kJobFailedPrefix, 0) == 0;
      say(cat("could not ask the ranks for their flight-recorder dumps through the store: ",
              failed_start ? std::string("it refuses every request since the job failed at its start") : e.what(),
              dump_signal_ ? "" : " (--dump-signal also asks with SIGUSR1)"));
    }
    std::vector<Rank *> asked_ranks;
    for (auto &r : ranks_) {
      if (r.exited) continue;
      if (dump_signal_) ::kill(r.pid, SIGUSR1);
      if (everyone || std::binary_search(connected.begin(), connected.end(), r.rank)) asked_ranks.push_back(&r);
    }
    auto until = Clock::now() + std::chrono::milliseconds(2000);
    while (Clock::now() < until) {
      bool all = true;
      for (Rank *r : asked_ranks) all = all && (r->exited || dump_mtime_ns(dir, r->rank) >= asked);
      if (all) break;
      pump_output(20);
      reap();
    }
  }

  // A rank that ends (exits, or is stopped) while it writes a dump leaves its temporary file
  // (rank<R>.pstate-trace.tmp.<pid>.<n>: the dump is written there, then renamed); once every rank
  // has ended, this job's are removed: only the names with our ranks' pids, never another job's.
  void remove_torn_dumps(const std::string &dir) const {
    DIR *d = ::opendir(dir.c_str());
    if (d == nullptr) return;
    std::vector<std::string> prefixes;
    for (const auto &r : ranks_) prefixes.push_back(cat("rank", r.rank, ".pstate-trace.tmp.", static_cast<long>(r.pid), "."));
    while (const dirent *e = ::readdir(d))
      for (const auto &p : prefixes)
        if (std::strncmp(e->d_name, p.c_str(), p.size()) == 0) ::unlinkat(::dirfd(d), e->d_name, 0);
    ::closedir(d);
  }

  // "flight-recorder dumps of ranks 0, 1, 3 in DIR: pstate doctor DIR" for the dumps this job wrote.
  // Called once every rank has ended.
  void report_dumps() const {
    const std::string dir = trace_dir();
    if (dir.empty()) return;
    remove_torn_dumps(dir);
    std::string with, without;
    for (const auto &r : ranks_) {
      std::string &list = dump_mtime_ns(dir, r.rank) >= job_started_ns_ ? with : without;
      list += cat(list.empty() ? "" : ", ", r.rank);
    }
    if (with.empty()) return;
    say(cat("flight-recorder dumps of ranks ", with, without.empty() ? std::string() : cat(" (none from ", without, ")"),
            " are in ", dir, ": `pstate doctor ", dir, "` says which rank is stuck and why"));
  }

  // The id of the job's /dev/shm names (JobStoreClient::shm_job_id), once rank 0 has published
  // it. A store this launcher does not serve (--rank0-store, a node other than 0) may be gone by
  // the time the ranks have ended, so it is asked every second until it answers; this launcher's
  // own store is asked at the end only.
  void learn_shm_job(bool at_end) {
    if (!shm_job_.empty()) return;
    if (!at_end && (store_ != nullptr || Clock::now() < next_shm_probe_)) return;
    next_shm_probe_ = Clock::now() + std::chrono::seconds(1);
    try {
      shm_job_ = job_store_->shm_job_id(at_end ? kStoreCallMs : 100);
    } catch (const Error &) {  // not up yet, or gone: next time (at the end: nothing to remove by)
    }
  }

  // Every rank of this launcher has ended: the /dev/shm names of its job that are left (ranks
  // killed while a peer had yet to attach to a segment they made) are removed, when no rank of the
  // job can still use them: with one node at once; with several, when the store lists no rank of
  // another node any more (those may share this /dev/shm: nodes in containers or namespaces of
  // one machine). Only names with this job's id: never another job's.
  void remove_leftover_shm() {
    learn_shm_job(true);
    if (shm_job_.empty()) return;
    if (nnodes_ > 1) {
      try {
        for (int r : job_store_->members(kStoreCallMs))
          if (r / nproc_ != node_rank_) return;  // another node's rank still runs
      } catch (const Error &) {
        return;  // the store cannot tell: leave them to the last node
      }
    }
    const std::vector<std::string> removed = remove_job_shm_names(shm_job_);
    if (!removed.empty())
      say(cat("removed ", removed.size(), " shared-memory name", removed.size() == 1 ? "" : "s",
              " the job's ranks left in /dev/shm (they were stopped before every peer had attached): /dev/shm/",
              shm::job_name_prefix(shm_job_), "*"));
  }

  // Forwards output and reaps until every rank ended or `ms` passed.
  void let_run(int ms) {
    auto until = Clock::now() + std::chrono::milliseconds(ms);
    while (!all_exited() && Clock::now() < until && g_stop_signal == 0) {
      pump_output(20);
      reap();
    }
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

  void say(const std::string &line) const { say_line(line); }

  // "rank 2 exited with status 1 at 0.45 s, rank 1 was stopped by pstate run (killed by signal 15)"
  std::string how_the_others_ended(const Rank *root) const {
    std::vector<const Rank *> rest;
    for (const auto &r : ranks_)
      if (&r != root) rest.push_back(&r);
    std::sort(rest.begin(), rest.end(), [](const Rank *a, const Rank *b) { return a->end_order < b->end_order; });
    std::string out;
    for (const Rank *r : rest) {
      out += out.empty() ? "" : ", ";
      if (r->stopped)
        out += cat("rank ", r->rank, " was stopped by pstate run (it ", describe_status(r->status), ")");
      else
        out += cat("rank ", r->rank, " ", describe_status(r->status), " at ",
                   seconds_text(seconds_between(start_, r->ended)));
    }
    return out;
  }

  // A rank failed: name it, let the others report, then stop them; the job's exit status.
  // --keep-going: each rank that fails is named once, and the others are left running (a job
  // that survives a dead rank: pstate_live_ranks, and later pstate_shrink).
  void announce_failures() {
    for (auto &r : ranks_) {
      if (!r.exited || r.stopped || r.announced || !failed_status(r.status)) continue;
      r.announced = true;
      say(cat("rank ", r.rank, " ", describe_status(r.status), " at ", seconds_text(seconds_between(start_, r.ended)),
              all_exited() ? std::string() : "; --keep-going: the other ranks go on"));
    }
  }

  int on_failure(const Rank &root) {
    std::string why = describe_status(root.status);
    say(cat("rank ", root.rank, " ", why, " at ", seconds_text(seconds_between(start_, root.ended)),
            all_exited() ? std::string()
                         : cat("; the other ranks have ", grace_ms_, " ms (--grace-ms) to report and exit")));
    request_dumps(cat("rank ", root.rank, " ", why));
    let_run(grace_ms_);
    if (!all_exited()) stop_all();
    drain();
    remove_leftover_shm();
    const Rank *first = root_cause();  // the same, unless a rank that ended meanwhile ended first
    say(cat("failed: rank ", first->rank, " ", describe_status(first->status), " first; then ",
            how_the_others_ended(first)));
    report_dumps();
    int code = exit_code_of(first->status);
    return code == 0 ? kExitFailure : code;
  }

  // Some ranks exited 0, others still run: say which, every --status-every seconds; end the job
  // --max-wait seconds after the first clean exit. Returns -1 to go on, else the exit status.
  int watch_stragglers(Clock::time_point &next_status) {
    const Rank *first_done = nullptr;
    for (const auto &r : ranks_)
      if (r.exited && (first_done == nullptr || r.end_order < first_done->end_order)) first_done = &r;
    if (first_done == nullptr) return -1;
    auto now = Clock::now();
    std::string running, done;
    for (const auto &r : ranks_) {
      if (r.exited) {
        done += cat(done.empty() ? "" : ", ", r.rank);
      } else {
        running += cat(running.empty() ? "" : ", ", "rank ", r.rank, " (pid ", r.pid, ", last output ",
                       static_cast<long>(seconds_between(r.last_output, now)), " s ago)");
      }
    }
    double waited = seconds_between(first_done->ended, now);
    if (max_wait_s_ > 0 && waited >= max_wait_s_) {
      say(cat("--max-wait ", max_wait_s_, " s passed since rank ", first_done->rank, " exited 0: stopping ", running));
      request_dumps(cat("--max-wait ", max_wait_s_, " s passed"));
      stop_all();
      drain();
      remove_leftover_shm();
      say(cat("failed: ", running, " did not finish within --max-wait ", max_wait_s_, " s of rank ", first_done->rank));
      report_dumps();
      return 124;
    }
    if (now >= next_status) {
      say(cat("still waiting for ", running, "; ranks ", done, " exited 0 (", static_cast<long>(waited),
              " s ago at the first)", max_wait_s_ > 0 ? std::string() : "; --max-wait S would end the job"));
      next_status = now + std::chrono::seconds(status_every_s_);
    }
    return -1;
  }

  int supervise() {
    Clock::time_point next_status{};
    bool someone_done = false;
    while (true) {
      pump_output(50);
      learn_shm_job(false);
      if (g_stop_signal != 0) {
        say_line(cat("got signal ", static_cast<int>(g_stop_signal), ", stopping all ranks"));
        request_dumps(cat("got signal ", static_cast<int>(g_stop_signal), " (", strsignal(g_stop_signal), ")"));
        stop_all();
        remove_leftover_shm();
        report_dumps();
        return 128 + g_stop_signal;
      }
      reap();
      if (max_respawns_ > 0) respawn_failures();
      if (keep_going_) {
        announce_failures();
      } else if (const Rank *root = root_cause()) {
        return on_failure(*root);
      }
      if (all_exited()) {
        drain();
        remove_leftover_shm();
        if (const Rank *first = root_cause()) {  // --keep-going: the job still lost ranks
          say(cat("failed: rank ", first->rank, " ", describe_status(first->status), " first; then ",
                  how_the_others_ended(first)));
          report_dumps();
          const int code = exit_code_of(first->status);
          return code == 0 ? kExitFailure : code;
        }
        // The job's store traffic in all (its ranks and this launcher's observer), at PSTATE_DEBUG=INFO.
        if (store_) store_log_.info("store: server at exit: ", describe_server_traffic(store_->stats()));
        return kExitOk;
      }
      if (!someone_done && ended_ > 0) {  // the first clean exit: the first status line in --status-every s
        someone_done = true;
        next_status = Clock::now() + std::chrono::seconds(status_every_s_);
      }
      if (someone_done)
        if (int code = watch_stragglers(next_status); code >= 0) return code;
    }
  }

  int nproc_, nnodes_, node_rank_;
  std::string addr_;
  int port_, grace_ms_, max_wait_s_, status_every_s_;
  bool host_store_ = true;
  std::string store_url_;  // --store
  bool keep_going_ = false;  // --keep-going
  int max_respawns_ = 0;     // --respawn K
  int respawned_ = 0;        // replacements started so far
  std::string token_, job_id_;
  std::vector<std::string> program_;
  Logger store_log_;
  std::unique_ptr<TcpStoreServer> store_;  // node 0 without --rank0-store: the job's store
  int ended_ = 0;  // ranks seen ending so far
  bool dumps_requested_ = false;
  bool dump_signal_ = false;                    // --dump-signal
  bool metrics_on_ = false;                     // --metrics
  MetricsAddress metrics_at_;
  std::mutex metrics_mutex_;                    // one scrape at a time
  std::unique_ptr<JobStoreClient> metrics_store_;  // the scrapes' own connection to the job's store
  std::unique_ptr<MetricsEndpoint> metrics_;       // after what it reads: stopped before it goes
  std::unique_ptr<JobStoreClient> job_store_;   // an observer of the job's store (dumps, shm id)
  std::string shm_job_;                         // the id of the job's /dev/shm names ("": not known)
  Clock::time_point next_shm_probe_{};
  static constexpr int64_t kStoreCallMs = 1000;  // the launcher's store calls: answered at once
  int64_t job_started_ns_ = 0;  // wall clock: dumps older than this are another job's
  Clock::time_point start_;
  bool prefix_;
  BindMode bind_;
  Placement placement_;  // where the ranks run, the CPUs this job claimed, whether they spin
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
  int max_wait = args.int_value("--max-wait", 0);
  if (max_wait < 0) throw UsageError("--max-wait must be >= 0 seconds (0: wait for ever)");
  int status_every = args.int_value("--status-every", 10);
  if (status_every < 1) throw UsageError("--status-every must be >= 1 second");
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
  } else if (nnodes > 1 && !args.value("--store")) {
    throw UsageError("--master HOST:PORT is required with --nnodes > 1 (the address of node 0), unless --store "
                     "names the job's store");
  } else if (args.flag("--rank0-store")) {
    port = free_loopback_port();  // rank 0 binds it later (another process could take it between)
  }  // else: the launcher's store binds a free port itself

  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  // Like mpirun's default, ranks that fit on the CPUs get one each: left alone, the scheduler
  // often stacks two ranks of a shared-memory group on one core, and every hand-off between them
  // then costs a context switch. Which CPUs are free of other pstate jobs is decided at the start
  // (place_ranks).
  if (args.flag("--bind-cores") && args.flag("--no-bind")) throw UsageError("--bind-cores and --no-bind exclude each other");
  const BindMode bind = args.flag("--bind-cores") ? BindMode::kForce
                        : args.flag("--no-bind")  ? BindMode::kNone
                                                  : BindMode::kDefault;
  Launcher launcher(nproc, nnodes, node_rank, addr, port, grace, max_wait, status_every, !args.flag("--no-prefix"),
                    bind, !args.flag("--rank0-store"));
  if (auto store = args.value("--store")) {
    if (args.flag("--rank0-store")) throw UsageError("--store and --rank0-store exclude each other");
    try {
      InitMethod m = parse_init_method(*store);
      if (m.kind == InitMethod::Kind::kEnv) throw UsageError("--store needs a store's URL, not env://");
      launcher.external_store(m.url());
    } catch (const Error &e) {
      throw UsageError(cat("--store: ", e.what()));
    }
  }
  if (args.flag("--keep-going")) launcher.keep_going();
  if (args.flag("--dump-signal")) launcher.dump_signal();
  if (auto m = args.value("--metrics")) {
    std::string spec = *m;
    if (spec.find(':') == std::string::npos) spec = ":" + spec;  // a bare PORT: every interface
    try {
      MetricsAddress at = parse_metrics_address(spec);
      if (at.port == 0) throw UsageError("--metrics needs a port (1..65535): Prometheus is told where to scrape");
      launcher.metrics(at);
    } catch (const Error &e) {
      throw UsageError(cat("--metrics: ", e.what()));
    }
  }
  if (args.value("--respawn")) {
    int k = args.int_value("--respawn", 0);
    if (k < 1) throw UsageError("--respawn K needs K >= 1 (the most replacements in all)");
    if (args.flag("--rank0-store") && !args.value("--store"))
      throw UsageError("--respawn needs the launcher's store (a replacement meets the survivors there): drop --rank0-store");
    launcher.respawn(k);
  }
  return launcher.run(args.positional());
}

}  // namespace

const Subcommand &run_subcommand() {
  static const Subcommand sub{kSpec, run_run};
  return sub;
}

}  // namespace pstate::cli
