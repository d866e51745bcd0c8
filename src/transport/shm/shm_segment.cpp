// shm_segment.cpp — create/open/attach/unlink of a group's POSIX shared segment (protocol in the
// header). The segment starts with a Header page (magic, layout, attach counter, pids), the
// caller's payload follows at a page boundary.
#include "transport/shm/shm_segment.hpp"

#include "common/arith.hpp"
#include "common/dev_shm.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pstate::shm {
namespace {

constexpr uint64_t kMagic = 0x70737461'74657368ULL;  // "pstatesh"


[[noreturn]] void throw_syscall(const std::string &label, const char *call, const std::string &name) {
  int err = errno;
  throw_error(PSTATE_ERR_TRANSPORT, label, ": ", call, "(", name, ") failed: ", std::strerror(err),
              err == ENOSPC || err == ENOMEM ? " (is /dev/shm full or too small?)" : "");
}

}  // namespace

struct ShmSegment::Header {
  std::atomic<uint64_t> magic;  // kMagic once the creator has filled the rest
  uint64_t total_bytes;
  uint64_t layout_tag;
  uint32_t size;
  uint32_t creator;
  alignas(64) std::atomic<uint32_t> attached;
  std::atomic<uint32_t> unlinked;
  std::atomic<uint32_t> flags_or;  // OR of every rank's attach_flags
  ShmSignal signal;  // notified when attached or unlinked change
  // followed by int32 pids[size] (pid_slot), then padding to a page boundary
};
static_assert(std::atomic<int32_t>::is_always_lock_free);

size_t ShmSegment::header_bytes() const {
  return round_up(sizeof(Header) + sizeof(int32_t) * static_cast<size_t>(params_.size), kPageBytes);
}

std::atomic<int32_t> *ShmSegment::pid_slot(int rank) const {
  return reinterpret_cast<std::atomic<int32_t> *>(base_ + sizeof(Header)) + rank;
}

ShmSegment::ShmSegment(const Params &params, const Deadline &deadline, ShmWaiter &waiter) : params_(params) {
  if (params_.name.size() < 2 || params_.name[0] != '/' || params_.name.find('/', 1) != std::string::npos ||
      params_.name.size() > 250)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, params_.label, ": shared-memory name \"", params_.name,
                "\" must be '/' followed by up to 249 characters without '/'");
  if (params_.size < 1 || params_.rank < 0 || params_.rank >= params_.size || params_.creator < 0 ||
      params_.creator >= params_.size)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, params_.label, ": rank ", params_.rank, " / creator ",
                params_.creator, " out of range for ", params_.size, " ranks");
  payload_offset_ = header_bytes();
  try {
    if (params_.rank == params_.creator)
      create();
    else
      open_existing(deadline, waiter);
    attach_and_wait(deadline, waiter);
  } catch (...) {
    unmap();
    unlink_quietly(params_.name);  // a failed set-up must not leave a file in /dev/shm
    throw;
  }
}

ShmSegment::~ShmSegment() { unmap(); }

void ShmSegment::unlink_quietly(const std::string &name) { shm_unlink(name.c_str()); }

uint32_t ShmSegment::group_flags() const { return header()->flags_or.load(std::memory_order_acquire); }

pid_t ShmSegment::pid_of(int rank) const {
  if (rank < 0 || rank >= params_.size) return -1;
  return pid_slot(rank)->load(std::memory_order_acquire);
}

void ShmSegment::create() {
  int fd = shm_open(params_.name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 && errno == EEXIST) {
    // A stale segment of this exact name (a crashed job that never finished attaching).
    shm_unlink(params_.name.c_str());
    fd = shm_open(params_.name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  }
  if (fd < 0) throw_syscall(params_.label, "shm_open", params_.name);
  if (ftruncate(fd, static_cast<off_t>(total_bytes())) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    throw_syscall(params_.label, "ftruncate", params_.name);
  }
  // Back every page now: a /dev/shm too small for the segment (a container's) fails here, with
  // the cause named, instead of a SIGBUS at the first write to a page it cannot back.
  if (int err = posix_fallocate(fd, 0, static_cast<off_t>(total_bytes())); err != 0) {
    close(fd);
    if (err == ENOSPC || err == ENOMEM)
      throw_error(PSTATE_ERR_NO_MEMORY, params_.label, ": shared segment ", params_.name, ": ",
                  dev_shm_advice(dev_shm_space(), cat("this segment needs ", human_bytes(total_bytes()))));
    errno = err;
    throw_syscall(params_.label, "posix_fallocate", params_.name);
  }
  map(fd, total_bytes());
  close(fd);
  Header *h = header();  // fresh pages are zero: counters, flags and pids start at 0
  h->total_bytes = total_bytes();
  h->layout_tag = params_.layout_tag;
  h->size = static_cast<uint32_t>(params_.size);
  h->creator = static_cast<uint32_t>(params_.creator);
  h->magic.store(kMagic, std::memory_order_release);
}

void ShmSegment::open_existing(const Deadline &deadline, ShmWaiter &waiter) {
  waiter.poll_wait([&] { return try_open_ready(); }, deadline, [&] {
    return cat(params_.label, " rank ", params_.rank, ": waiting for rank ", params_.creator,
               " to create shared segment ", params_.name);
  });
  check_header();
}

// One attempt: true when the segment exists and carries the magic (then it stays mapped). A
// segment with the magic but another size was made with other options: MISMATCH.
bool ShmSegment::try_open_ready() {
  int fd = shm_open(params_.name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    throw_syscall(params_.label, "shm_open", params_.name);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    throw_syscall(params_.label, "fstat", params_.name);
  }
  if (static_cast<size_t>(st.st_size) < sizeof(Header)) {
    close(fd);  // created but not truncated yet
    return false;
  }
  map(fd, static_cast<size_t>(st.st_size));
  close(fd);
  if (header()->magic.load(std::memory_order_acquire) != kMagic) {
    unmap();
    return false;
  }
  check_header();
  return true;
}

void ShmSegment::check_header() const {
  const Header *h = header();
  if (h->total_bytes != total_bytes() || h->size != static_cast<uint32_t>(params_.size) ||
      h->layout_tag != params_.layout_tag || h->creator != static_cast<uint32_t>(params_.creator))
    throw_error(PSTATE_ERR_MISMATCH, params_.label, " rank ", params_.rank, ": shared segment ", params_.name,
                " was created for ", h->size, " ranks, ", h->total_bytes, " bytes, layout ", h->layout_tag,
                " but this rank expects ", params_.size, " ranks, ", total_bytes(), " bytes, layout ",
                params_.layout_tag, " (ranks must pass the same options)");
}

void ShmSegment::attach_and_wait(const Deadline &deadline, ShmWaiter &waiter) {
  Header *h = header();
  int32_t expected = 0;
  if (!pid_slot(params_.rank)->compare_exchange_strong(expected, static_cast<int32_t>(getpid()),
                                                      std::memory_order_acq_rel))
    throw_error(PSTATE_ERR_MISMATCH, params_.label, ": rank ", params_.rank, " attached twice to ", params_.name,
                " (pid ", expected, " and pid ", getpid(), "): two processes claim the same rank");
  h->flags_or.fetch_or(params_.attach_flags, std::memory_order_acq_rel);
  uint32_t now_attached = h->attached.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (now_attached == static_cast<uint32_t>(params_.size)) {
    shm_unlink(params_.name.c_str());
    h->unlinked.store(1, std::memory_order_release);
    waiter.notify(h->signal);
  }
  waiter.wait(
      h->signal, [&] { return h->unlinked.load(std::memory_order_acquire) != 0; }, deadline, [&] {
        return cat(params_.label, " rank ", params_.rank, ": waiting for all ", params_.size,
                   " ranks to attach to ", params_.name, " (", h->attached.load(), " attached)");
      });
}

void ShmSegment::map(int fd, size_t bytes) {
  void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw_syscall(params_.label, "mmap", params_.name);
  base_ = static_cast<uint8_t *>(p);
  mapped_ = bytes;
}

void ShmSegment::unmap() {
  if (base_ != nullptr) munmap(base_, mapped_);
  base_ = nullptr;
  mapped_ = 0;
}

}  // namespace pstate::shm
