// store.cpp — open_store (picks the TCP, file or etcd store from init_method) and the helpers every
// store shares: key/value validation, key quoting for messages, the add() counter format, and a
// barrier built from add + wait.
#include "bootstrap/store.hpp"

#ifdef PSTATE_HAVE_ETCD
#include "bootstrap/etcd_store.hpp"
#endif
#include "bootstrap/file_store.hpp"
#include "bootstrap/init_method.hpp"
#include "bootstrap/tcp_store.hpp"
#include "common/error.hpp"

#include <charconv>
#include <thread>

namespace pstate {

std::unique_ptr<Store> open_store(const StoreOptions &options, const Logger &logger) {
  if (options.rank < -1)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "store: rank ", options.rank, " is invalid (use 0.., or -1 for an observer)");
  if (options.world_size < 1 && !(options.rank == -1 && options.world_size == 0))
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "store: world_size ", options.world_size, " must be at least 1");
  if (options.timeout_ms <= 0)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "store: timeout_ms ", options.timeout_ms, " must be positive");
  InitMethod method = parse_init_method(options.init_method);
  switch (method.kind) {
    case InitMethod::Kind::kTcp:
      return TcpStore::open(options, method, logger);
    case InitMethod::Kind::kFile:
      return FileStore::open(options, method.path, logger);
    case InitMethod::Kind::kEtcd:
#ifdef PSTATE_HAVE_ETCD
      return EtcdStore::open(options, method, logger);
#else
      throw_error(PSTATE_ERR_UNSUPPORTED, "store ", method.url(), ": this libpstate was built without the etcd store "
                  "(libcurl4-openssl-dev and nlohmann-json3-dev were missing at build time): install them and rebuild");
#endif
    case InitMethod::Kind::kEnv:
      break;
  }
  throw_error(PSTATE_ERR_INVALID_ARGUMENT,
              "store: env:// must be resolved to tcp://MASTER_ADDR:MASTER_PORT first (resolve_launch_env)");
}

std::unique_ptr<Store> open_store(const StoreOptions &options) {
  Logger logger;
  logger.set_rank(options.rank);
  return open_store(options, logger);
}

void Store::await_change(std::chrono::milliseconds pause) { std::this_thread::sleep_for(pause); }

void store_barrier(Store &store, const std::string &name, int world_size, Deadline deadline) {
  std::string arrived = name + "/arrived", done = name + "/done";
  int64_t count = store.add(arrived, 1, deadline);
  if (count > world_size)
    throw_error(PSTATE_ERR_MISMATCH, "barrier ", quote_key(name), " on the store at ", store.describe(), ": ", count,
                " arrivals for ", world_size, " ranks (was the barrier name used twice?)");
  if (count == world_size) store.set(done, Bytes{'1'}, deadline);
  store.wait({done}, deadline);
}

void validate_key(const std::string &key) {
  if (key.empty()) throw_error(PSTATE_ERR_INVALID_ARGUMENT, "store key is empty");
  if (key.size() > kStoreMaxKeyBytes)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "store key ", quote_key(key), " is ", key.size(),
                " bytes; keys are at most ", kStoreMaxKeyBytes);
}

void validate_value(const std::string &key, const Bytes &value) {
  if (value.size() > kStoreMaxValueBytes)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "value of store key ", quote_key(key), " is ", value.size(),
                " bytes; values are at most ", kStoreMaxValueBytes, " (64 MiB)");
}

std::string describe_traffic(const StoreTraffic &t) {
  return cat("requests ", t.requests, " frames ", t.frames, " sent_bytes ", t.bytes_sent, " received_bytes ",
             t.bytes_received, " connects ", t.connects);
}

std::string quote_key(std::string_view key) {
  constexpr size_t kShown = 120;
  std::string out = "'";
  for (size_t i = 0; i < key.size() && i < kShown; ++i) {
    unsigned char c = static_cast<unsigned char>(key[i]);
    if (c < 0x20 || c >= 0x7f || c == '\'' || c == '\\') {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (key.size() > kShown) out += "...";
  return out + "'";
}

std::string quote_keys(const std::vector<std::string> &keys, size_t total, size_t limit) {
  std::string out;
  size_t shown = 0;
  for (const auto &k : keys) {
    if (shown == limit) break;
    out += (shown ? ", " : "") + quote_key(k);
    ++shown;
  }
  if (total > shown) out += cat(shown ? " and " : "", total - shown, " more");
  return out;
}

std::string rank_list(const std::vector<int> &ranks, size_t total, size_t limit) {
  std::string out;
  size_t items = 0, shown = 0;
  for (size_t i = 0; i < ranks.size() && items < limit;) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (j > i + 1) {
      out += cat(items ? ", " : "", ranks[i], "-", ranks[j]);
    } else {
      j = i;  // a pair is two items: "2, 3"
      out += cat(items ? ", " : "", ranks[i]);
    }
    shown += j - i + 1;
    ++items;
    i = j + 1;
  }
  if (total > shown) out += cat(" and ", total - shown, " more");
  return out;
}

std::string ranks_phrase(const std::vector<int> &ranks, size_t total) {
  if (total == 1 && !ranks.empty()) return cat("rank ", ranks.front());
  std::string list = rank_list(ranks, total);
  size_t comma = list.rfind(", ");
  if (comma != std::string::npos && list.find(" more") == std::string::npos) list.replace(comma, 2, " and ");
  return "ranks " + list;
}

Bytes counter_to_bytes(int64_t value) {
  std::string text = std::to_string(value);
  return Bytes(text.begin(), text.end());
}

bool counter_from_bytes(const Bytes &bytes, int64_t *value) {
  if (bytes.empty() || bytes.size() > 20) return false;
  const char *begin = reinterpret_cast<const char *>(bytes.data());
  const char *end = begin + bytes.size();
  auto [ptr, ec] = std::from_chars(begin, end, *value);
  return ec == std::errc() && ptr == end;
}

}  // namespace pstate
