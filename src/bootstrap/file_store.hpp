// file_store.hpp — the rendezvous store as a directory on a shared filesystem (file:///PATH).
//
// For clusters where ranks share a filesystem but rank 0's port may not be reachable (or is not
// known in advance). Layout under PATH:
//   meta            "world_size", a hash of the job token, the job id and the creating process;
//                   created once, atomically (write a temporary file, then link() it: the first
//                   writer wins)
//   keys/NAME       one file per key; written to tmp/ and rename()d into place, so a reader sees
//                   the old value or the new one, never half of one
//   locks/NAME      flock()ed by add() around its read-modify-write
//   ranks/R         flock()ed by the process that claims rank R while its store is open; the
//                   kernel drops the lock when that process dies, so a crashed rank can rejoin.
//                   It names the process: "pid P on host H (boot B, start T)"
//   joined/R        rank R opened the store (it stays when R leaves)
//   failed          a process of this job was refused in a way that ends the job (see below)
//   open.lock       flock()ed while a process opens the store (claim, meta, reclaim)
//   made-by-pstate  the store created PATH itself (so the last rank out removes it)
//   tmp/            temporary files
// Waits poll with a back-off of 1 ms doubling to 64 ms (bounded), never a busy loop. NAME is the
// key with unsafe bytes %-escaped, or a SHA-256 of the key when that would be too long.
// The token hash detects a rank of another job (PSTATE_ERR_AUTH), but anyone who can read the
// directory can read its values: the directory is private to its user (0700).
//
// Start-up failures, as with the TCP store (store.hpp): a process of this job (same token, same
// job id) refused for its claim (world size, rank range, a rank taken) before every rank joined
// writes `failed`, which every waiting rank reads at its next poll and throws ("the job cannot
// start: ..."); a process that cannot use the directory at all (another user's) writes the same
// news next to it, PATH.refused, when the parent directory lets it. Waits log progress at INFO
// and name the ranks that never joined when they time out.
//
// Leftovers: the last rank to close the store cleanly removes what the store created (PATH too,
// when the store made it). A directory left by an earlier job that did not finish (killed,
// crashed) is recognised when a process opens it and no rank of it holds its lock: when every
// process it names is provably gone (this host, this boot, pid not running or reused), the
// directory is reclaimed (emptied, logged at WARN); when some ran elsewhere, it is named
// ("holds the store of an earlier job ... delete it or use a new directory", MISMATCH).
#pragma once

#include "bootstrap/roster.hpp"
#include "bootstrap/socket.hpp"
#include "bootstrap/store.hpp"
#include "common/log.hpp"

#include <ctime>
#include <functional>
#include <atomic>
#include <memory>
#include <optional>
#include <string>

namespace pstate {

class FileStore final : public Store {
 public:
  // Creates the directory tree if needed, claims the rank (options.rank; -1 claims none), checks
  // token, job id and world size against meta (or reclaims an earlier job's leftover). Throws
  // INVALID_ARGUMENT, TRANSPORT (filesystem errors, permissions), AUTH, MISMATCH.
  static std::unique_ptr<FileStore> open(const StoreOptions &options, const std::string &dir, const Logger &logger);
  ~FileStore() override;  // releases the rank claim

  void set(const std::string &key, const Bytes &value, Deadline deadline) override;
  Bytes get(const std::string &key, Deadline deadline) override;
  int64_t add(const std::string &key, int64_t delta, Deadline deadline) override;
  void wait(const std::vector<std::string> &keys, Deadline deadline) override;
  bool check(const std::string &key, Deadline deadline) override;
  bool erase(const std::string &key, Deadline deadline) override;
  Bytes set_if_absent(const std::string &key, const Bytes &value, Deadline deadline) override;
  void abandon(pstate_status_t status, const std::string &why) noexcept override;  // writes `failed`
  void interrupt() noexcept override { interrupted_.store(true, std::memory_order_release); }
  std::string describe() const override { return url_; }
  // Releases the rank claim; the last rank of the world to close removes the store. Never waits
  // for other ranks.
  bool close(Deadline deadline) override;

 private:
  std::atomic<bool> interrupted_{false};  // interrupt(): the next try of poll_until throws ABORTED
  FileStore(const StoreOptions &options, const std::string &dir, const Logger &logger);
  void create_tree();
  [[noreturn]] void refuse_permission(const std::string &what, const std::string &path, int err);
  net::Fd lock_for_open(Deadline deadline);
  void check_meta();
  template <typename Body>
  auto locked(const std::string &key, const char *call, Deadline deadline, Body &&body);
  void refuse_foreign_entries() const;
  bool reclaim_if_leftover(const JobMeta &meta);
  void claim_rank();
  [[noreturn]] void refuse(pstate_status_t status, const std::string &why, bool member);
  AbsentRanks absent_ranks() const;
  void check_job_failed();
  bool poll_until(Deadline deadline, const std::string &what, const std::function<bool()> &ready);
  void remove_store();
  std::string key_path(const std::string &key) const;
  std::string lock_path(const std::string &key) const;
  std::string write_temporary(const Bytes &value);
  void write_atomically(const std::string &path, const Bytes &value);
  std::optional<Bytes> read_if_exists(const std::string &path);
  [[noreturn]] void fail_fs(const std::string &what, const std::string &path, int err) const;
  void require_open(const char *call) const;

  StoreOptions options_;
  std::string dir_;
  std::string url_;
  Logger logger_;
  net::Fd claim_;  // holds the flock on ranks/R
  bool closed_ = false;
  bool made_dir_ = false;  // this process's mkdir created dir_
  timespec meta_time_{};   // meta's mtime: a PATH.refused older than this is an earlier job's
};

}  // namespace pstate
