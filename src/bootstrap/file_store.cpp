// file_store.cpp — the shared-filesystem store (see file_store.hpp for the directory layout, the
// start-up failures it passes on and how it treats an earlier job's leftovers).
#include "bootstrap/file_store.hpp"

#include "bootstrap/crypto.hpp"
#include "bootstrap/roster.hpp"
#include "common/error.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

namespace pstate {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kFirstBackoffMs = 1;
constexpr int kMaxBackoffMs = 64;
constexpr int kProgressEveryMs = 3000;  // a waiting rank logs who is missing this often (INFO)
constexpr size_t kMaxEscapedName = 200;

// A file name for a key: safe bytes kept, others %XX; a hash when the result would be too long.
std::string file_name_of(const std::string &key) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string name = "k";
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.') {
      name += static_cast<char>(c);
    } else {
      name += '%';
      name += kHex[c >> 4];
      name += kHex[c & 15];
    }
    if (name.size() > kMaxEscapedName) return "h" + crypto::to_hex(crypto::sha256(crypto::as_bytes(key)));
  }
  return name;
}

std::string boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id.empty() ? "?" : id;
}

// A process's start time (clock ticks after boot, /proc/PID/stat field 22): with the pid, it
// tells a process from a later one that got the same pid. 0 when unknown.
unsigned long long start_time_of(long long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(f, stat);
  size_t paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return 0;
  std::istringstream rest(stat.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  return 0;
}

// Which process holds (or held) something: "pid 123 on host h1 (boot 9f0c..., start 4711)".
struct ProcessRecord {
  long long pid = 0;
  std::string host;
  std::string boot;  // empty: not recorded (an older pstate)
  unsigned long long start = 0;
};

std::string record_of_this_process() {
  long long pid = ::getpid();
  return cat("pid ", pid, " on host ", this_host(), " (boot ", boot_id(), ", start ", start_time_of(pid), ")");
}

bool parse_record(const std::string &text, ProcessRecord *r) {
  char host[256] = {}, boot[64] = {};
  int n =
      std::sscanf(text.c_str(), "pid %lld on host %255s (boot %63[^,], start %llu)", &r->pid, host, boot, &r->start);
  if (n < 2) return false;
  r->host = host;
  if (n >= 3) r->boot = boot;
  return true;
}

enum class Liveness { kGone, kAlive, kUnknown };

// kGone only when certain: this host, and another boot, or no such pid, or a pid reused since.
Liveness liveness(const ProcessRecord &r) {
  if (r.host != this_host()) return Liveness::kUnknown;
  if (!r.boot.empty() && r.boot != boot_id()) return Liveness::kGone;
  if (::kill(static_cast<pid_t>(r.pid), 0) != 0 && errno == ESRCH) return Liveness::kGone;
  if (r.start != 0 && start_time_of(r.pid) != r.start) return Liveness::kGone;
  return Liveness::kAlive;
}

bool read_all(int fd, Bytes *out) {
  out->clear();
  uint8_t chunk[65536];
  for (;;) {
    ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return false;
    if (got == 0) return true;
    if (out->size() + static_cast<size_t>(got) > kStoreMaxValueBytes + 4096) {
      errno = EFBIG;
      return false;
    }
    out->insert(out->end(), chunk, chunk + got);
  }
}

bool write_all(int fd, const uint8_t *data, size_t n) {
  while (n > 0) {
    ssize_t put = ::write(fd, data, n);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) return false;
    data += put;
    n -= static_cast<size_t>(put);
  }
  return true;
}

// Entries of a directory (no . and ..); empty when it cannot be read.
std::vector<std::string> entries_of(const std::string &dir) {
  std::vector<std::string> out;
  DIR *d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  ::closedir(d);
  return out;
}

// True when some process holds the flock of path (a rank file of a live rank).
bool locked_by_someone(const std::string &path) {
  net::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return false;
  if (::flock(fd.get(), LOCK_SH | LOCK_NB) == 0) return false;  // closing fd drops it
  return errno == EWOULDBLOCK;
}

std::string user_name(uid_t uid) {
  passwd *pw = ::getpwuid(uid);
  return pw != nullptr ? cat("uid ", uid, " (", pw->pw_name, ")") : cat("uid ", uid);
}

}  // namespace

std::unique_ptr<FileStore> FileStore::open(const StoreOptions &options, const std::string &dir, const Logger &logger) {
  std::unique_ptr<FileStore> store(new FileStore(options, dir, logger));
  store->create_tree();
  net::Fd open_lock = store->lock_for_open(Deadline::after_ms(options.timeout_ms));
  store->check_meta();
  store->claim_rank();
  logger.info("store: rank ", options.rank, " opened ", store->url_);
  return store;
}

FileStore::FileStore(const StoreOptions &options, const std::string &dir, const Logger &logger)
    : options_(options), dir_(dir), url_("file://" + dir), logger_(logger) {}

FileStore::~FileStore() = default;  // closing claim_ releases the flock

void FileStore::fail_fs(const std::string &what, const std::string &path, int err) const {
  throw_error(PSTATE_ERR_TRANSPORT, "store ", url_, ": ", what, " ", path, ": ", std::strerror(err));
}

// This process may not use the directory (another user's, 0700). Nothing inside can be written,
// so the news for the waiting ranks goes next to it, in PATH.refused, when the parent allows.
void FileStore::refuse_permission(const std::string &what, const std::string &path, int err) {
  struct stat st {};
  std::string owner;
  if (::stat(dir_.c_str(), &st) == 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    owner = cat(": ", dir_, " belongs to ", user_name(st.st_uid), ", mode ", mode, ", and this process runs as ",
                user_name(::getuid()));
  }
  std::string why = cat(what, " ", path, ": ", err == EACCES ? "permission denied" : std::strerror(err), owner,
                        ": run every rank of the job as the same user (the store's directory is private to its user)");
  if (options_.rank >= 0) {
    std::string note = job_failure_record(
        PSTATE_ERR_TRANSPORT, cat("rank ", options_.rank, " (", this_process(), ") cannot use the store: ", why));
    std::string tmp = cat(dir_, ".refused.", ::getpid());
    net::Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.valid() && write_all(fd.get(), reinterpret_cast<const uint8_t *>(note.data()), note.size()) &&
        ::rename(tmp.c_str(), (dir_ + ".refused").c_str()) == 0) {
      why += "; the other ranks were told (" + dir_ + ".refused)";
    } else {
      ::unlink(tmp.c_str());
    }
  }
  throw_error(PSTATE_ERR_TRANSPORT, "store ", url_, ": ", why);
}

void FileStore::create_tree() {
  // mkdir -p of dir_ and its subdirectories.
  for (size_t slash = 1; slash <= dir_.size(); ++slash) {
    if (slash != dir_.size() && dir_[slash] != '/') continue;
    std::string prefix = dir_.substr(0, slash);
    if (::mkdir(prefix.c_str(), 0700) == 0) {
      if (slash == dir_.size()) made_dir_ = true;
    } else if (errno == EACCES && slash == dir_.size()) {
      refuse_permission("cannot create", prefix, errno);
    } else if (errno != EEXIST) {
      fail_fs("cannot create", prefix, errno);
    }
  }
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0) fail_fs("cannot open", dir_, errno);
  if (!S_ISDIR(st.st_mode))
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", url_,
                ": that path is not a directory; the file store needs a directory (it will be created)");
  if (::access(dir_.c_str(), R_OK | W_OK | X_OK) != 0) {
    if (errno == EACCES) refuse_permission("cannot use", dir_, errno);
    fail_fs("cannot use", dir_, errno);
  }
  if (made_dir_) {
    net::Fd marker(::open((dir_ + "/made-by-pstate").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  }
  for (const char *sub : {"/keys", "/locks", "/ranks", "/joined", "/tmp"}) {
    std::string path = dir_ + sub;
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
      if (errno == EACCES) refuse_permission("cannot create", path, errno);
      fail_fs("cannot create", path, errno);
    }
  }
}

// Opening (claim, meta, reclaim) is one process at a time, so two ranks never both take a
// leftover for theirs.
net::Fd FileStore::lock_for_open(Deadline deadline) {
  std::string path = dir_ + "/open.lock";
  net::Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd.valid()) fail_fs("cannot open", path, errno);
  int backoff = kFirstBackoffMs;
  while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) fail_fs("cannot lock", path, errno);
    if (deadline.expired())
      throw_error(PSTATE_ERR_TIMEOUT, "store ", url_, ": ", path,
                  " stayed locked (a process stuck opening the store?)");
    net::sleep_until_at_most(backoff, deadline);
    backoff = std::min(backoff * 2, kMaxBackoffMs);
  }
  return fd;
}

void FileStore::check_meta() {
  std::string meta_path = dir_ + "/meta";
  bool observer = options_.rank == -1 && options_.world_size == 0;
  bool in_range = options_.rank < options_.world_size;
  std::string me = record_of_this_process();
  std::optional<Bytes> bytes = read_if_exists(meta_path);
  JobMeta meta;
  if (bytes && !decode_job_meta(text_of(*bytes), MetaDialect::kFileStore, &meta))
    throw_error(PSTATE_ERR_MISMATCH, "store ", url_, ": ", meta_path,
                " is not a pstate file store's meta file: delete the directory or use a new one");
  bool had_meta = bytes.has_value();
  if (bytes && !observer && meta.creator != me && reclaim_if_leftover(meta)) bytes.reset();
  if (!bytes && !observer && in_range) {
    if (!had_meta) refuse_foreign_entries();
    // Publish our view unless someone did first: link() of a complete file fails with EEXIST then.
    JobMeta mine;
    mine.world_size = options_.world_size;
    mine.token = token_fingerprint(options_.job_token, MetaDialect::kFileStore);
    mine.job_id = options_.job_id;
    mine.creator_rank = options_.rank;
    mine.creator = me;
    std::string tmp = write_temporary(bytes_of(encode_job_meta(mine, MetaDialect::kFileStore)));
    int rc = ::link(tmp.c_str(), meta_path.c_str());
    int err = errno;
    ::unlink(tmp.c_str());
    if (rc != 0 && err != EEXIST) fail_fs("cannot create", meta_path, err);
    bytes = read_if_exists(meta_path);
    if (bytes && !decode_job_meta(text_of(*bytes), MetaDialect::kFileStore, &meta))
      throw_error(PSTATE_ERR_MISMATCH, "store ", url_, ": ", meta_path, " is not a pstate file store's meta file");
  }
  if (!in_range && !observer) {
    std::string why = cat("rank ", options_.rank, " is out of range for world_size ", options_.world_size,
                          " (ranks are 0..", options_.world_size - 1, ")");
    if (bytes && meta.token == token_fingerprint(options_.job_token, MetaDialect::kFileStore) && meta.job_id == options_.job_id &&
        meta.world_size == options_.world_size)
      refuse(PSTATE_ERR_MISMATCH, why, true);
    throw_error(PSTATE_ERR_MISMATCH, "store ", url_, ": ", why);
  }
  if (!bytes) return;  // an observer before anyone arrived
  struct stat st {};
  if (::stat(meta_path.c_str(), &st) == 0) meta_time_ = st.st_mtim;
  if (meta.token != token_fingerprint(options_.job_token, MetaDialect::kFileStore))
    throw_error(PSTATE_ERR_AUTH, "job token refused by the store at ", url_,
                ": set PSTATE_JOB_TOKEN to the job's token",
                " (or the directory holds another job's store: use a fresh directory per job)");
  if (meta.job_id != options_.job_id)
    throw_error(PSTATE_ERR_MISMATCH, "store ", url_, ": ",
                meta.job_id.empty() ? std::string("this store has no job id")
                                    : cat("this store belongs to job '", meta.job_id, "'"),
                options_.job_id.empty() ? std::string(" and you have no PSTATE_JOB_ID")
                                        : cat(", you are job '", options_.job_id, "'"),
                ": give each job its own directory");
  if (observer) return;
  if (meta.world_size != options_.world_size)
    refuse(PSTATE_ERR_MISMATCH,
           cat("rank ", options_.rank, " says world_size ", options_.world_size, ", rank ", meta.creator_rank,
               " says ", meta.world_size),
           true);
}

// No meta yet (checked under the open lock, so no rank of this job has written anything): the
// store's subdirectories must be empty, or they hold someone else's files (a directory such as a
// home folder with its own tmp/) that the last rank out would delete with the store's.
void FileStore::refuse_foreign_entries() const {
  for (const char *sub : {"/keys", "/locks", "/ranks", "/joined", "/tmp"}) {
    std::vector<std::string> names = entries_of(dir_ + sub);
    if (!names.empty())
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "store ", url_, ": ", dir_, sub, " holds ", names.size(),
                  " files ('", names.front(), "'", names.size() > 1 ? ", ..." : "",
                  ") that no pstate job wrote (the directory has no store meta file): give the file store an "
                  "empty or new directory; pstate removes what it creates there when the job ends");
  }
}

// meta is not ours. When no rank of its job holds its lock and every process it names is gone,
// the directory is an earlier job's leftover: emptied (true). When a process of it is alive,
// it is a job in progress (false: join it). When some ran on other hosts, pstate cannot tell:
// MISMATCH naming them.
bool FileStore::reclaim_if_leftover(const JobMeta &meta) {
  std::string ranks_dir = dir_ + "/ranks";
  std::vector<std::string> rank_files = entries_of(ranks_dir);
  for (const auto &name : rank_files)
    if (locked_by_someone(ranks_dir + "/" + name)) return false;  // a live rank: a job in progress
  std::vector<ProcessRecord> records;
  ProcessRecord r;
  if (!meta.creator.empty() && parse_record(meta.creator, &r)) records.push_back(r);
  for (const auto &name : rank_files) {
    auto bytes = read_if_exists(ranks_dir + "/" + name);
    if (bytes && parse_record(text_of(*bytes), &r)) records.push_back(r);
  }
  std::string gone, elsewhere;
  for (const auto &rec : records) {
    Liveness l = liveness(rec);
    if (l == Liveness::kAlive) return false;
    std::string &list = l == Liveness::kGone ? gone : elsewhere;
    list += cat(list.empty() ? "" : ", ", rec.pid, rec.host == this_host() ? std::string() : " on host " + rec.host);
  }
  if (records.empty() || !elsewhere.empty())
    throw_error(PSTATE_ERR_MISMATCH, "store ", url_, ": ", dir_, " holds the store of an earlier job (",
                records.empty() ? std::string("no process of it recorded") : "pids " + elsewhere,
                gone.empty() ? std::string() : ", and " + gone + " here, not running",
                "; none holds its rank's lock, but pstate cannot tell from this host that they are gone): delete it "
                "or use a new directory");
  for (const char *sub : {"/keys", "/locks", "/joined", "/tmp"})
    for (const auto &name : entries_of(dir_ + sub)) ::unlink((dir_ + sub + "/" + name).c_str());
  std::string mine = options_.rank >= 0 ? std::to_string(options_.rank) : std::string();
  for (const auto &name : rank_files)
    if (name != mine) ::unlink((ranks_dir + "/" + name).c_str());
  ::unlink((dir_ + "/failed").c_str());
  ::unlink((dir_ + "/meta").c_str());
  logger_.warn("store ", url_, ": reclaimed the store of an earlier job (pids ", gone,
               ", not running; it did not finish cleanly)");
  return true;
}

void FileStore::claim_rank() {
  int rank = options_.rank;
  if (rank < 0) return;
  std::string path = cat(dir_, "/ranks/", rank);
  net::Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd.valid()) fail_fs("cannot open", path, errno);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) fail_fs("cannot lock", path, errno);
    Bytes holder;
    read_all(fd.get(), &holder);
    std::string who = text_of(holder);
    refuse(PSTATE_ERR_MISMATCH,
           cat("rank ", rank, " is already taken by another process (", who.empty() ? std::string("unknown") : who,
               "): start exactly one process with RANK=", rank),
           true);
  }
  std::string me = record_of_this_process();
  if (::ftruncate(fd.get(), 0) != 0 || ::pwrite(fd.get(), me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()))
    fail_fs("cannot write", path, errno);
  claim_ = std::move(fd);
  net::Fd joined(::open(cat(dir_, "/joined/", rank).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
}

// Refuses this process. A process of this job (member) refused before every rank joined means
// the world can never be complete: `failed` tells the waiting ranks, which throw at their next
// poll.
void FileStore::refuse(pstate_status_t status, const std::string &why, bool member) {
  if (member) {
    bool complete = true;
    for (int r = 0; r < options_.world_size && complete; ++r)
      complete = ::access(cat(dir_, "/joined/", r).c_str(), F_OK) == 0;
    if (!complete) {
      try {
        write_atomically(dir_ + "/failed",
                         bytes_of(job_failure_record(status, refused_reason(options_.rank, this_process(), why))));
      } catch (const Error &) {
        // the refusal below still says it; the others will time out naming this rank
      }
    }
  }
  throw_error(status, "store ", url_, ": ", why);
}

// Throws the job's failure when a refused rank left one (failed, or PATH.refused newer than this
// store's meta).
void FileStore::check_job_failed() {
  auto throw_from = [&](const Bytes &bytes, const std::string &where) {
    throw_job_failure(text_of(bytes), cat(url_, " in ", where));
  };
  if (::access((dir_ + "/failed").c_str(), F_OK) == 0)
    if (auto bytes = read_if_exists(dir_ + "/failed")) throw_from(*bytes, "failed");
  std::string note = dir_ + ".refused";
  struct stat st {};
  if (::stat(note.c_str(), &st) != 0) return;
  bool fresh = st.st_mtim.tv_sec > meta_time_.tv_sec ||
               (st.st_mtim.tv_sec == meta_time_.tv_sec && st.st_mtim.tv_nsec >= meta_time_.tv_nsec);
  if (!fresh) return;
  if (auto bytes = read_if_exists(note)) throw_from(*bytes, note);
}

// Who is absent now: ranks whose lock nobody holds, and of those the ones that joined and left
// (what their rank file names is the "last seen" of the first few).
AbsentRanks FileStore::absent_ranks() const {
  AbsentRanks absent(options_.world_size);
  size_t seen = 0;
  for (int r = 0; r < options_.world_size; ++r) {
    if (r == options_.rank) continue;
    std::string rank_file = cat(dir_, "/ranks/", r);
    if (locked_by_someone(rank_file)) continue;
    if (::access(cat(dir_, "/joined/", r).c_str(), F_OK) != 0) {
      absent.add(r, Absence::kNeverConnected);
      continue;
    }
    std::string who;
    if (seen++ < 4) {
      std::ifstream f(rank_file);
      std::getline(f, who);
      who = cat("left (", who, ")");
    }
    absent.add(r, Absence::kLeft, who);
  }
  return absent;
}

// Calls ready() until it returns true or the deadline passes, sleeping 1, 2, 4 ... 64 ms between
// tries; between tries, a job failure left by a refused rank is thrown, and every few seconds the
// absent ranks are logged (INFO). False when the deadline passed first.
bool FileStore::poll_until(Deadline deadline, const std::string &what, const std::function<bool()> &ready) {
  int backoff = kFirstBackoffMs;
  auto start = Clock::now(), next_report = start + std::chrono::milliseconds(kProgressEveryMs);
  for (;;) {
    if (ready()) return true;
    check_job_failed();
    if (interrupted_.load(std::memory_order_acquire))
      throw_error(PSTATE_ERR_ABORTED, "store ", url_, ": ", what, " interrupted by this process");
    if (deadline.expired()) return false;
    if (Clock::now() >= next_report) {
      next_report += std::chrono::milliseconds(kProgressEveryMs);
      AbsentRanks absent(options_.world_size);
      if (logger_.enabled(LogLevel::kInfo)) absent = absent_ranks();
      if (absent.count() > 0)
        logger_.info("store: ", what, " waiting ", ms_since(start) / 1000,
                     " s: ", static_cast<size_t>(options_.world_size) - absent.count(), " of ", options_.world_size,
                     " ranks joined; waiting for ", absent.waiting_for(), " (", absent.describe(), ")");
    }
    net::sleep_until_at_most(backoff, deadline);
    backoff = std::min(backoff * 2, kMaxBackoffMs);
  }
}

std::string FileStore::key_path(const std::string &key) const { return dir_ + "/keys/" + file_name_of(key); }
std::string FileStore::lock_path(const std::string &key) const { return dir_ + "/locks/" + file_name_of(key); }

// Writes value to a fresh file under tmp/ and returns its path.
std::string FileStore::write_temporary(const Bytes &value) {
  uint8_t nonce[8];
  crypto::fill_random(nonce, sizeof nonce);
  std::string tmp = cat(dir_, "/tmp/", getpid(), ".", crypto::to_hex(nonce));
  net::Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) fail_fs("cannot create", tmp, errno);
  if (!write_all(fd.get(), value.data(), value.size())) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail_fs("cannot write", tmp, err);
  }
  return tmp;
}

// Readers of path see its old content or value, never a mix: rename() replaces it atomically.
void FileStore::write_atomically(const std::string &path, const Bytes &value) {
  std::string tmp = write_temporary(value);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail_fs("cannot rename a temporary file to", path, err);
  }
}

std::optional<Bytes> FileStore::read_if_exists(const std::string &path) {
  net::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return std::nullopt;
    fail_fs("cannot open", path, errno);
  }
  Bytes out;
  if (!read_all(fd.get(), &out)) fail_fs("cannot read", path, errno);
  return out;
}

void FileStore::set(const std::string &key, const Bytes &value, Deadline) {
  require_open("set");
  validate_key(key);
  validate_value(key, value);
  write_atomically(key_path(key), value);
}

Bytes FileStore::get(const std::string &key, Deadline deadline) {
  require_open("get");
  validate_key(key);
  auto start = Clock::now();
  const bool spent = deadline.expired();
  std::string path = key_path(key), what = cat("get(", quote_key(key), ")");
  std::optional<Bytes> value;
  if (!poll_until(deadline, what, [&] { return (value = read_if_exists(path)).has_value(); }))
    throw_get_timeout(what, url_, waited_for_timeout(start, spent), absent_ranks().describe(), key);
  return std::move(*value);
}

// Runs body while holding the key's lock file (flock), the store's only read-modify-write.
template <typename Body>
auto FileStore::locked(const std::string &key, const char *call, Deadline deadline, Body &&body) {
  auto start = Clock::now();
  const bool spent = deadline.expired();
  std::string path = lock_path(key);
  net::Fd lock(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock.valid()) fail_fs("cannot open", path, errno);
  bool got = poll_until(deadline, cat(call, "(", quote_key(key), ")"), [&] {
    if (::flock(lock.get(), LOCK_EX | LOCK_NB) == 0) return true;
    if (errno != EWOULDBLOCK && errno != EINTR) fail_fs("cannot lock", path, errno);
    return false;
  });
  if (!got)
    throw_error(PSTATE_ERR_TIMEOUT, call, "(", quote_key(key), ") on the store at ", url_, " ",
                timed_out_after(waited_for_timeout(start, spent)), " waiting for the lock ", path,
                " (held by a stuck process?)");
  return body();  // closing `lock` releases the flock
}

int64_t FileStore::add(const std::string &key, int64_t delta, Deadline deadline) {
  require_open("add");
  validate_key(key);
  return locked(key, "add", deadline, [&] {
    int64_t current = 0;
    std::optional<Bytes> old = read_if_exists(key_path(key));
    if (old && !counter_from_bytes(*old, &current))
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "add(", quote_key(key), ") on the store at ", url_, ": the key holds ",
                  old->size(), " bytes that are not a decimal integer");
    int64_t next = 0;
    if (__builtin_add_overflow(current, delta, &next))
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "add(", quote_key(key), "): ", current, " + ", delta,
                  " overflows int64");
    write_atomically(key_path(key), counter_to_bytes(next));
    return next;
  });
}

Bytes FileStore::set_if_absent(const std::string &key, const Bytes &value, Deadline deadline) {
  require_open("set_if_absent");
  validate_key(key);
  validate_value(key, value);
  return locked(key, "set_if_absent", deadline, [&] {
    if (std::optional<Bytes> old = read_if_exists(key_path(key))) return std::move(*old);
    write_atomically(key_path(key), value);
    return value;
  });
}

void FileStore::wait(const std::vector<std::string> &keys, Deadline deadline) {
  require_open("wait");
  for (const auto &k : keys) validate_key(k);
  auto start = Clock::now();
  const bool spent = deadline.expired();
  std::vector<std::string> missing = keys;
  auto all_there = [&] {
    std::erase_if(missing, [&](const std::string &k) { return ::access(key_path(k).c_str(), F_OK) == 0; });
    return missing.empty();
  };
  std::string what = cat("wait(", quote_keys(keys, keys.size(), 3), ")");
  if (!poll_until(deadline, what, all_there))
    throw_wait_timeout(what, url_, waited_for_timeout(start, spent), absent_ranks().describe(), missing, missing.size(),
                       keys.size());
}

// The last rank of the world to leave cleanly removes the store: what it created, and the
// directory when the store made it. "Last" is counted with add(), which every rank of the world
// calls once here; a rank that never gets here (killed, failed) leaves the store for the next
// job to reclaim.
bool FileStore::close(Deadline deadline) {
  if (closed_) return true;
  bool last = false;
  if (options_.rank >= 0) {
    try {
      last = add("pstate/store/closed", 1, deadline) == options_.world_size;
    } catch (const Error &e) {
      logger_.warn("store ", url_, ": could not count this rank out (", e.what(),
                   "); the store stays for the next job to reclaim");
    }
  }
  claim_.reset();
  closed_ = true;
  if (last) remove_store();
  return true;
}

void FileStore::remove_store() {
  for (const char *sub : {"/keys", "/locks", "/ranks", "/joined", "/tmp"}) {
    for (const auto &name : entries_of(dir_ + sub)) ::unlink((dir_ + sub + "/" + name).c_str());
    ::rmdir((dir_ + sub).c_str());
  }
  for (const char *file : {"/meta", "/failed", "/open.lock"}) ::unlink((dir_ + file).c_str());
  bool made = ::access((dir_ + "/made-by-pstate").c_str(), F_OK) == 0;
  ::unlink((dir_ + "/made-by-pstate").c_str());
  if (made && ::rmdir(dir_.c_str()) != 0)
    logger_.info("store ", url_, ": left ", dir_, " in place (", std::strerror(errno), ")");
  logger_.info("store ", url_, ": the last rank out removed the store");
}

void FileStore::abandon(pstate_status_t status, const std::string &why) noexcept {
  try {
    if (::access((dir_ + "/failed").c_str(), F_OK) == 0) return;  // the job failed already
    write_atomically(dir_ + "/failed", bytes_of(job_failure_record(status, gave_up_reason(options_.rank, why))));
  } catch (const std::exception &) {
    // the others will time out, naming this rank
  }
}

void FileStore::require_open(const char *call) const {
  if (closed_) throw_error(PSTATE_ERR_INVALID_STATE, call, ": the store at ", url_, " was closed by this rank");
}

bool FileStore::check(const std::string &key, Deadline) {
  require_open("check");
  validate_key(key);
  return ::access(key_path(key).c_str(), F_OK) == 0;
}

bool FileStore::erase(const std::string &key, Deadline) {
  require_open("erase");
  validate_key(key);
  std::string path = key_path(key);
  if (::unlink(path.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  fail_fs("cannot remove", path, errno);
}

}  // namespace pstate
