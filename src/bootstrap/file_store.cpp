// file_store.cpp — the shared-filesystem store (see file_store.hpp for the directory layout).
#include "bootstrap/file_store.hpp"

#include "bootstrap/hmac_sha256.hpp"
#include "common/error.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>

namespace pstate {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kFirstBackoffMs = 1;
constexpr int kMaxBackoffMs = 64;
constexpr size_t kMaxEscapedName = 200;

int64_t ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// Calls ready() until it returns true or the deadline passes, sleeping 1, 2, 4 ... 64 ms between
// tries. Returns false when the deadline passed first.
bool poll_until(Deadline deadline, const std::function<bool()> &ready) {
  int backoff = kFirstBackoffMs;
  for (;;) {
    if (ready()) return true;
    if (deadline.expired()) return false;
    net::sleep_until_at_most(backoff, deadline);
    backoff = std::min(backoff * 2, kMaxBackoffMs);
  }
}

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

std::string token_fingerprint(const std::string &token) {
  if (token.empty()) return "none";
  return crypto::to_hex(crypto::hmac_sha256(crypto::as_bytes(token), crypto::as_bytes("pstate-file-store-v1")));
}

std::string this_host() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) return "?";
  return host;
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

struct Meta {
  int world_size = 0;
  std::string token;
  int created_by = -1;
};

std::string meta_text(const Meta &m) {
  return cat("pstate-file-store 1\nworld_size ", m.world_size, "\ntoken ", m.token, "\ncreated_by_rank ", m.created_by,
             "\n");
}

bool parse_meta(const Bytes &bytes, Meta *m) {
  std::string text(bytes.begin(), bytes.end());
  char token[129] = {};
  int n = std::sscanf(text.c_str(), "pstate-file-store 1\nworld_size %d\ntoken %128s\ncreated_by_rank %d\n",
                      &m->world_size, token, &m->created_by);
  m->token = token;
  return n == 3;
}

}  // namespace

std::unique_ptr<FileStore> FileStore::open(const StoreOptions &options, const std::string &dir, const Logger &logger) {
  if (options.rank >= 0 && options.rank >= options.world_size)
    throw_error(PSTATE_ERR_MISMATCH, "store file://", dir, ": rank ", options.rank, " is out of range for world_size ",
                options.world_size, " (ranks are 0..", options.world_size - 1, ")");
  std::unique_ptr<FileStore> store(new FileStore(options, dir, logger));
  store->create_tree();
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

void FileStore::create_tree() {
  // mkdir -p of dir_ and its four subdirectories.
  for (size_t slash = 1; slash <= dir_.size(); ++slash) {
    if (slash != dir_.size() && dir_[slash] != '/') continue;
    std::string prefix = dir_.substr(0, slash);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) fail_fs("cannot create", prefix, errno);
  }
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0) fail_fs("cannot open", dir_, errno);
  if (!S_ISDIR(st.st_mode))
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "init_method ", url_,
                ": that path is not a directory; the file store needs a directory (it will be created)");
  for (const char *sub : {"/keys", "/locks", "/ranks", "/tmp"}) {
    std::string path = dir_ + sub;
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) fail_fs("cannot create", path, errno);
  }
}

void FileStore::check_meta() {
  std::string meta_path = dir_ + "/meta";
  bool observer = options_.rank == -1 && options_.world_size == 0;
  if (!observer) {
    // Publish our view unless someone did first: link() of a complete file fails with EEXIST then.
    Meta mine{options_.world_size, token_fingerprint(options_.job_token), options_.rank};
    std::string text = meta_text(mine);
    std::string tmp = write_temporary(Bytes(text.begin(), text.end()));
    int rc = ::link(tmp.c_str(), meta_path.c_str());
    int err = errno;
    ::unlink(tmp.c_str());
    if (rc != 0 && err != EEXIST) fail_fs("cannot create", meta_path, err);
  }
  std::optional<Bytes> bytes = read_if_exists(meta_path);
  if (!bytes) return;  // an observer before anyone arrived
  Meta meta;
  if (!parse_meta(*bytes, &meta))
    throw_error(PSTATE_ERR_MISMATCH, "store ", url_, ": ", meta_path,
                " is not a pstate file store's meta file: use a fresh directory per job");
  if (meta.token != token_fingerprint(options_.job_token))
    throw_error(PSTATE_ERR_AUTH, "job token refused by the store at ", url_, ": set PSTATE_JOB_TOKEN to the job's token",
                " (or the directory holds an earlier job's store: use a fresh directory per job)");
  if (observer) return;
  if (meta.world_size != options_.world_size)
    throw_error(PSTATE_ERR_MISMATCH, "store ", url_, ": rank ", options_.rank, " says world_size ", options_.world_size,
                ", rank ", meta.created_by, " says ", meta.world_size,
                " (or the directory holds an earlier job's store: use a fresh directory per job)");
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
    std::string who(holder.begin(), holder.end());
    throw_error(PSTATE_ERR_MISMATCH, "store ", url_, ": rank ", rank, " is already taken by another process (",
                who.empty() ? std::string("unknown") : who, ")");
  }
  std::string me = cat("pid ", getpid(), " on host ", this_host());
  if (::ftruncate(fd.get(), 0) != 0 || ::pwrite(fd.get(), me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()))
    fail_fs("cannot write", path, errno);
  claim_ = std::move(fd);
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
  std::string path = key_path(key);
  std::optional<Bytes> value;
  if (!poll_until(deadline, [&] { return (value = read_if_exists(path)).has_value(); }))
    throw_error(PSTATE_ERR_TIMEOUT, "get(", quote_key(key), ") on the store at ", url_, " timed out after ",
                ms_since(start), " ms waiting for key ", quote_key(key),
                " (did the rank that sets it fail or not start?)");
  return std::move(*value);
}

int64_t FileStore::add(const std::string &key, int64_t delta, Deadline deadline) {
  require_open("add");
  validate_key(key);
  auto start = Clock::now();
  std::string path = lock_path(key);
  net::Fd lock(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock.valid()) fail_fs("cannot open", path, errno);
  bool locked = poll_until(deadline, [&] {
    if (::flock(lock.get(), LOCK_EX | LOCK_NB) == 0) return true;
    if (errno != EWOULDBLOCK && errno != EINTR) fail_fs("cannot lock", path, errno);
    return false;
  });
  if (!locked)
    throw_error(PSTATE_ERR_TIMEOUT, "add(", quote_key(key), ") on the store at ", url_, " timed out after ",
                ms_since(start), " ms waiting for the lock ", path, " (held by a stuck process?)");
  int64_t current = 0;
  std::optional<Bytes> old = read_if_exists(key_path(key));
  if (old && !counter_from_bytes(*old, &current))
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "add(", quote_key(key), ") on the store at ", url_, ": the key holds ",
                old->size(), " bytes that are not a decimal integer");
  int64_t next = 0;
  if (__builtin_add_overflow(current, delta, &next))
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "add(", quote_key(key), "): ", current, " + ", delta, " overflows int64");
  write_atomically(key_path(key), counter_to_bytes(next));
  return next;  // closing `lock` releases the flock
}

void FileStore::wait(const std::vector<std::string> &keys, Deadline deadline) {
  require_open("wait");
  for (const auto &k : keys) validate_key(k);
  auto start = Clock::now();
  std::vector<std::string> missing = keys;
  auto all_there = [&] {
    std::erase_if(missing, [&](const std::string &k) { return ::access(key_path(k).c_str(), F_OK) == 0; });
    return missing.empty();
  };
  if (!poll_until(deadline, all_there))
    throw_error(PSTATE_ERR_TIMEOUT, "wait(", quote_keys(keys, keys.size(), 3), ") on the store at ", url_,
                " timed out after ", ms_since(start), " ms: ", missing.size(), " of ", keys.size(),
                " keys never set: ", quote_keys(missing, missing.size()));
}

bool FileStore::close(Deadline) {
  claim_.reset();
  closed_ = true;
  return true;
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
