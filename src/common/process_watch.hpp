// process_watch.hpp — has a process on this host exited? Answered without signals or ptrace.
//
// Process liveness, shared by every transport: UCX's shared-memory transports never report a
// dead peer (a receive from a rank that was SIGKILLed simply never completes), and pstate's own
// shared-memory communicator waits on flags a dead peer never sets. So for every peer on the same
// host pstate watches the peer's process itself (the UCX worker's waits, the shared-memory
// communicator's, the context's live ranks). Preferred: a pidfd (pidfd_open(2), Linux >= 5.3),
// which becomes readable when the process exits, can sit in the same poll() set as the UCX
// wake-up fd (so a blocked rank wakes at once), and cannot be fooled by pid reuse. Fallback (no pidfd_open, e.g. an old kernel
// or a seccomp filter): /proc/PID/stat, where a missing entry or state 'Z'/'X' means exited —
// 'Z' matters because a SIGKILLed child that its parent has not reaped yet is still listed.
#pragma once

#include <sys/types.h>

namespace pstate {

// What a survivor of a dead peer can do: the end of every PEER_LOST that a wait raises (UCX,
// shared memory, notice).
inline constexpr const char kPeerLostWayOut[] =
    "the job cannot continue as it is: call pstate_shrink (survivors go on without the dead) or pstate_abort";

class ProcessWatch {
 public:
  // use_pidfd = false forces the /proc fallback (tests of the fallback path).
  explicit ProcessWatch(pid_t pid, bool use_pidfd = true);
  ~ProcessWatch();
  ProcessWatch(const ProcessWatch &) = delete;
  ProcessWatch &operator=(const ProcessWatch &) = delete;
  ProcessWatch(ProcessWatch &&other) noexcept;
  ProcessWatch &operator=(ProcessWatch &&other) noexcept;

  pid_t pid() const { return pid_; }
  // A file descriptor that polls readable (POLLIN) once the process exited, or -1 when this
  // watch uses the /proc fallback (then call exited() periodically).
  int fd() const { return fd_; }
  // Non-blocking: true once the process is known to have exited (sticky).
  bool exited();
  // True when exits are noticed through fd() (pidfd); false for the /proc fallback.
  bool uses_pidfd() const { return fd_ >= 0; }

 private:
  void close_fd() noexcept;
  pid_t pid_ = 0;
  int fd_ = -1;
  bool exited_ = false;
};

// /proc/PID/stat says the process is gone or a zombie (exposed for tests of the fallback).
bool proc_stat_says_exited(pid_t pid);

}  // namespace pstate
