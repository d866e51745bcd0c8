// cpu_claims.cpp — the host-wide CPU record (cpu_claims.hpp): one OFD-locked file per CPU.
#include "cli/cpu_claims.hpp"

#include "common/error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace pstate::cli {
namespace {

constexpr const char *kDefaultDir = "/dev/shm/pstate-cpus";

// A descriptor closed on scope exit unless released.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

// The record's directory, made world-writable and sticky (like /tmp) when this process makes it,
// so the jobs of every user of the host use one record and none can remove another's files.
int open_dir(const std::string &dir, std::string &why) {
  if (::mkdir(dir.c_str(), 01777) == 0) ::chmod(dir.c_str(), 01777);  // past the umask
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) why = cat("cannot open ", dir, ": ", std::strerror(errno));
  return fd;
}

struct flock whole_file(short type) {
  struct flock fl{};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;  // to the end, whatever it grows to
  fl.l_pid = 0;  // required by the OFD commands
  return fl;
}

// cpu<N>'s lock file, opened read-write (a write lock needs it), made by whoever comes first and
// left readable and writable by every user (the file means nothing; the lock is the record).
int open_cpu_file(int dir_fd, const std::string &name, std::string &why) {
  const int fd = ::openat(dir_fd, name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) {
    why = cat("cannot open ", name, ": ", std::strerror(errno));
    return -1;
  }
  struct stat st;
  if (::fstat(fd, &st) == 0 && st.st_uid == ::geteuid() && (st.st_mode & 0777) != 0666) ::fchmod(fd, 0666);
  return fd;
}

// The holder's words in a held CPU's file ("job run-ab12, pstate run pid 77"), or "".
std::string holder_of(int fd) {
  char buf[256];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return "";
  std::string s(buf, static_cast<size_t>(n));
  s.erase(std::find(s.begin(), s.end(), '\n'), s.end());
  return s;
}

enum class Take { kClaimed, kFree, kHeld, kError };

// Tries to take cpu<N> (want) or only looks (!want). A file that another process removed or
// replaced between our open and our lock is opened again: a lock on a name no one else can find
// would claim nothing.
Take take_or_look(int dir_fd, int cpu, bool want, const std::string &holder, int &claimed_fd, std::string &held_by,
                  std::string &why) {
  const std::string name = cat("cpu", cpu);
  for (int attempt = 0; attempt < 3; ++attempt) {
    Fd fd(open_cpu_file(dir_fd, name, why));
    if (fd.fd < 0) return Take::kError;
    struct flock fl = whole_file(F_WRLCK);
    if (!want) {
      if (::fcntl(fd.fd, F_OFD_GETLK, &fl) != 0) {
        why = cat("fcntl(F_OFD_GETLK) on ", name, ": ", std::strerror(errno));
        return Take::kError;
      }
      if (fl.l_type == F_UNLCK) return Take::kFree;
      held_by = holder_of(fd.fd);
      return Take::kHeld;
    }
    if (::fcntl(fd.fd, F_OFD_SETLK, &fl) != 0) {
      if (errno == EAGAIN || errno == EACCES) {
        held_by = holder_of(fd.fd);
        return Take::kHeld;
      }
      why = cat("fcntl(F_OFD_SETLK) on ", name, ": ", std::strerror(errno));
      return Take::kError;
    }
    struct stat mine, named;
    if (::fstat(fd.fd, &mine) != 0 || ::fstatat(dir_fd, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0 ||
        mine.st_dev != named.st_dev || mine.st_ino != named.st_ino)
      continue;  // replaced under us: take the file that carries the name now
    if (::ftruncate(fd.fd, 0) == 0) {
      const std::string text = holder + "\n";
      [[maybe_unused]] ssize_t n = ::pwrite(fd.fd, text.data(), text.size(), 0);
    }
    claimed_fd = fd.release();
    return Take::kClaimed;
  }
  why = cat(name, " was replaced three times while this launcher took it");
  return Take::kError;
}

}  // namespace

CpuClaim &CpuClaim::operator=(CpuClaim &&o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    cpu_ = o.cpu_;
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

CpuClaim::~CpuClaim() {
  if (fd_ >= 0) ::close(fd_);
}

std::string cpu_claim_dir() {
  const char *dir = std::getenv("PSTATE_CPU_CLAIM_DIR");
  return dir != nullptr && *dir != '\0' ? dir : kDefaultDir;
}

CpuSurvey claim_cpus(const std::vector<int> &allowed, size_t want, const std::string &holder) {
  CpuSurvey survey;
  const std::string dir = cpu_claim_dir();
  Fd dir_fd(open_dir(dir, survey.unusable));
  if (dir_fd.fd < 0) return survey;
  for (int cpu : allowed) {
    int fd = -1;
    std::string held_by, why;
    const bool take = survey.claimed.size() < want;
    switch (take_or_look(dir_fd.fd, cpu, take, holder, fd, held_by, why)) {
      case Take::kClaimed:
        survey.claimed.emplace_back(cpu, fd);
        break;
      case Take::kFree:
        break;
      case Take::kHeld:
        survey.held.push_back(cpu);
        survey.held_text += cat(survey.held_text.empty() ? "" : ", ", "CPU ", cpu,
                                held_by.empty() ? std::string() : cat(" (", held_by, ")"));
        break;
      case Take::kError:
        survey.claimed.clear();  // a record read in part could put two jobs on one CPU: none of it
        survey.held.clear();
        survey.held_text.clear();
        survey.unusable = cat(dir, ": ", why);
        return survey;
    }
  }
  return survey;
}

std::string cpu_list_text(std::vector<int> cpus) {
  if (cpus.empty()) return "none";
  std::sort(cpus.begin(), cpus.end());
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += cat(out.empty() ? "" : ",", cpus[i]);
    if (j > i) out += cat("-", cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace pstate::cli
