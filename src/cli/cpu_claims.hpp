// cpu_claims.hpp — the host-wide record of the CPUs that pstate jobs run their ranks on, so that
// two `pstate run` jobs on one host (two serving instances on an 8-GPU machine) never pin ranks to
// the same CPU.
//
// The record is one lock file per CPU in a directory every launcher of the host sees:
// /dev/shm/pstate-cpus/cpu<N> (pstate needs /dev/shm anyway; mode 1777 like /tmp, so the jobs of
// every user of the host share it), or $PSTATE_CPU_CLAIM_DIR. A launcher claims CPU N by taking a
// write lock on the whole of cpu<N> without waiting (fcntl F_OFD_SETLK: an open-file-description
// lock). What records the claim is the kernel's lock, not the file, so it cannot go stale: the
// lock belongs to the open file, which the launcher and (inheriting the descriptor) the ranks on
// that CPU hold; when the last of them ends — exits, crashes, SIGKILL, even with the launcher
// killed first — the kernel drops it, and the next job finds the CPU free. A file left behind
// means nothing. The file's text (the holder's job id and pid) is only for messages.
//
// Why OFD locks and not flock(2): the same lifetime (inherited across fork, dropped with the last
// descriptor), plus F_OFD_GETLK, which tells whether a CPU is held without taking it, so a
// launcher that only looks (--no-bind) can never make another launcher that claims at the same
// moment see a free CPU as taken. `lslocks` lists the claims (OFDLCK, with the file's path).
#pragma once

#include <string>
#include <vector>

namespace pstate::cli {

// One CPU this process holds in the record; move-only, released when the last descriptor of the
// lock file (this one, and copies the ranks inherited) closes.
class CpuClaim {
 public:
  CpuClaim(int cpu, int fd) : cpu_(cpu), fd_(fd) {}
  CpuClaim(CpuClaim &&o) noexcept : cpu_(o.cpu_), fd_(o.fd_) { o.fd_ = -1; }
  CpuClaim &operator=(CpuClaim &&o) noexcept;
  CpuClaim(const CpuClaim &) = delete;
  CpuClaim &operator=(const CpuClaim &) = delete;
  ~CpuClaim();

  int cpu() const { return cpu_; }
  int fd() const { return fd_; }  // close-on-exec; a rank that runs on cpu() inherits it

 private:
  int cpu_;
  int fd_;
};

// What a launcher found in the record for the CPUs it may use.
struct CpuSurvey {
  std::vector<CpuClaim> claimed;  // the CPUs this launcher now holds, in the order of `allowed`
  std::vector<int> held;          // CPUs of `allowed` another process holds (another pstate job)
  std::string held_text;          // "CPU 0 (job run-3f2a..., pstate run pid 4242), CPU 1 (...)"
  std::string unusable;           // why the record could not be read ("" when it could)
};

// The record's directory: $PSTATE_CPU_CLAIM_DIR, else /dev/shm/pstate-cpus.
std::string cpu_claim_dir();

// Claims up to `want` CPUs of `allowed` that no other process holds, in order, and finds which of
// `allowed` others hold (all of them are looked at). want == 0 only looks (claims nothing).
// `holder` is written into each claimed file for other launchers' messages. Never throws: a record
// that cannot be used (no directory, no permission) is reported in `unusable`.
CpuSurvey claim_cpus(const std::vector<int> &allowed, size_t want, const std::string &holder);

// "0-3,6": a list of CPUs as the kernel writes them (Cpus_allowed_list); "none" when empty.
std::string cpu_list_text(std::vector<int> cpus);

}  // namespace pstate::cli
