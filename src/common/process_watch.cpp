// process_watch.cpp — pidfd_open(2) via syscall (glibc 2.36 has no wrapper on every target), with
// a /proc/PID/stat fallback that also treats zombies as exited. See process_watch.hpp for why.
#include "common/process_watch.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <utility>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434  // same number on every Linux architecture
#endif

namespace pstate {

bool proc_stat_says_exited(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  FILE *f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return errno == ENOENT || errno == ESRCH;
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "PID (comm) S ...": comm may itself contain ')' and spaces, so take the last ')'.
  std::string line(buf);
  size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return n == 0;
  char state = line[close + 2];
  return state == 'Z' || state == 'X' || state == 'x';
}

ProcessWatch::ProcessWatch(pid_t pid, bool use_pidfd) : pid_(pid) {
  if (!use_pidfd) return;
  long fd = ::syscall(SYS_pidfd_open, static_cast<long>(pid), 0L);
  if (fd >= 0) {
    fd_ = static_cast<int>(fd);
    ::fcntl(fd_, F_SETFD, FD_CLOEXEC);
  } else if (errno == ESRCH) {
    exited_ = true;  // already gone (and reaped)
  }
  // Any other error (ENOSYS, EPERM from seccomp, EMFILE): fall back to /proc in exited().
}

ProcessWatch::~ProcessWatch() { close_fd(); }

ProcessWatch::ProcessWatch(ProcessWatch &&other) noexcept
    : pid_(other.pid_), fd_(std::exchange(other.fd_, -1)), exited_(other.exited_) {}

ProcessWatch &ProcessWatch::operator=(ProcessWatch &&other) noexcept {
  if (this != &other) {
    close_fd();
    pid_ = other.pid_;
    fd_ = std::exchange(other.fd_, -1);
    exited_ = other.exited_;
  }
  return *this;
}

void ProcessWatch::close_fd() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool ProcessWatch::exited() {
  if (exited_) return true;
  if (fd_ >= 0) {
    pollfd p{fd_, POLLIN, 0};
    exited_ = ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
  } else {
    exited_ = proc_stat_says_exited(pid_);
  }
  return exited_;
}

}  // namespace pstate
