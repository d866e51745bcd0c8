// file_store.hpp — the rendezvous store as a directory on a shared filesystem (file:///PATH).
//
// For clusters where ranks share a filesystem but rank 0's port may not be reachable (or is not
// known in advance). Layout under PATH:
//   meta            "world_size", a hash of the job token and the creating rank; created once,
//                   atomically (write a temporary file, then link() it: the first writer wins)
//   keys/NAME       one file per key; written to tmp/ and rename()d into place, so a reader sees
//                   the old value or the new one, never half of one
//   locks/NAME      flock()ed by add() around its read-modify-write
//   ranks/R         flock()ed by the process that claims rank R while its store is open; the
//                   kernel drops the lock when that process dies, so a crashed rank can rejoin
//   tmp/            temporary files
// Waits poll with a back-off of 1 ms doubling to 64 ms (bounded), never a busy loop. NAME is the
// key with unsafe bytes %-escaped, or a SHA-256 of the key when that would be too long.
// The token hash detects a rank of another job (PSTATE_ERR_AUTH), but anyone who can read the
// directory can read its values: use a directory only the job's user can access. Use a fresh
// directory per job; an old job's meta file makes a new job fail with MISMATCH or AUTH.
#pragma once

#include "bootstrap/socket.hpp"
#include "bootstrap/store.hpp"
#include "common/log.hpp"

#include <memory>
#include <optional>
#include <string>

namespace pstate {

class FileStore final : public Store {
 public:
  // Creates the directory tree if needed, checks token and world size against meta, claims the
  // rank (options.rank; -1 claims none). Throws INVALID_ARGUMENT, TRANSPORT (filesystem errors),
  // AUTH, MISMATCH.
  static std::unique_ptr<FileStore> open(const StoreOptions &options, const std::string &dir, const Logger &logger);
  ~FileStore() override;  // releases the rank claim

  void set(const std::string &key, const Bytes &value, Deadline deadline) override;
  Bytes get(const std::string &key, Deadline deadline) override;
  int64_t add(const std::string &key, int64_t delta, Deadline deadline) override;
  void wait(const std::vector<std::string> &keys, Deadline deadline) override;
  bool check(const std::string &key, Deadline deadline) override;
  bool erase(const std::string &key, Deadline deadline) override;
  std::string describe() const override { return url_; }
  bool close(Deadline deadline) override;  // releases the rank claim; never waits

 private:
  FileStore(const StoreOptions &options, const std::string &dir, const Logger &logger);
  void create_tree();
  void check_meta();
  void claim_rank();
  std::string key_path(const std::string &key) const;
  std::string lock_path(const std::string &key) const;
  std::string write_temporary(const Bytes &value);
  void write_atomically(const std::string &path, const Bytes &value);
  std::optional<Bytes> read_if_exists(const std::string &path);
  [[noreturn]] void fail_fs(const std::string &what, const std::string &path, int err) const;

  StoreOptions options_;
  std::string dir_;
  std::string url_;
  Logger logger_;
  void require_open(const char *call) const;
  net::Fd claim_;  // holds the flock on ranks/R
  bool closed_ = false;
};

}  // namespace pstate
