// etcd_store.cpp — the store on etcd (see etcd_store.hpp for the layout, leases and watches).
#include "bootstrap/etcd_store.hpp"

#include "bootstrap/crypto.hpp"
#include "bootstrap/wire.hpp"
#include "common/error.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <set>

namespace pstate {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr size_t kMaxOpsPerTxn = 100;  // etcd's --max-txn-ops is 128 by default
constexpr int64_t kWatchSliceMs = 2000;  // a wait re-reads (failover, quorum, progress) this often
constexpr int64_t kProgressLogMs = 5000;

int64_t ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

std::string text_of(const Bytes &b) { return std::string(b.begin(), b.end()); }
Bytes bytes_of(const std::string &s) { return Bytes(s.begin(), s.end()); }

// The first key after every key starting with p (etcd's range_end for a prefix).
std::string prefix_end(std::string p) {
  while (!p.empty()) {
    if (static_cast<unsigned char>(p.back()) < 0xff) {
      p.back() = static_cast<char>(static_cast<unsigned char>(p.back()) + 1);
      return p;
    }
    p.pop_back();
  }
  return std::string(1, '\0');
}

json put_op(const std::string &key, const std::string &value, int64_t lease = 0) {
  json put = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease) put["lease"] = std::to_string(lease);
  return {{"request_put", put}};
}

json range_op(const std::string &key, const std::string &end = "", bool keys_only = false) {
  json r = {{"key", base64_encode(key)}};
  if (!end.empty()) r["range_end"] = base64_encode(end);
  if (keys_only) r["keys_only"] = true;
  return {{"request_range", r}};
}

json absent(const std::string &key) {
  return {{"key", base64_encode(key)}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}};
}

json unchanged(const std::string &key, int64_t mod_revision) {
  return {{"key", base64_encode(key)}, {"target", "MOD"}, {"result", "EQUAL"}, {"mod_revision", std::to_string(mod_revision)}};
}

// The kvs of the i-th response of a transaction (an empty array when absent).
json kvs_of(const json &txn, size_t i) {
  const json &responses = txn.value("responses", json::array());
  if (i >= responses.size()) return json::array();
  const json &range = responses[i].value("response_range", json::object());
  return range.value("kvs", json::array());
}

std::string key_of(const json &kv) { return base64_decode(kv.value("key", "")); }
std::string value_of(const json &kv) { return base64_decode(kv.value("value", "")); }

std::string token_fingerprint(const std::string &token) {
  if (token.empty()) return "none";
  return crypto::to_hex(crypto::hmac_sha256(crypto::as_bytes(token), crypto::as_bytes("pstate-etcd-store-v1")));
}

struct Meta {
  int world_size = 0;
  std::string token, job_id;
  int creator = -1;
  std::string text() const {
    return cat("pstate-etcd-store 1\nworld_size ", world_size, "\ntoken ", token, "\njob_id ",
               crypto::to_hex(crypto::as_bytes(job_id)), "\ncreator ", creator, "\n");
  }
  static Meta parse(const std::string &text) {
    Meta m;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t nl = text.find('\n', pos);
      std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
      pos = nl == std::string::npos ? text.size() : nl + 1;
      size_t sp = line.find(' ');
      if (sp == std::string::npos) continue;
      std::string name = line.substr(0, sp), value = line.substr(sp + 1);
      if (name == "world_size") m.world_size = std::atoi(value.c_str());
      if (name == "token") m.token = value;
      if (name == "creator") m.creator = std::atoi(value.c_str());
      if (name == "job_id")
        for (size_t i = 0; i + 1 < value.size(); i += 2)
          m.job_id += static_cast<char>(std::stoi(value.substr(i, 2), nullptr, 16));
    }
    return m;
  }
};

std::string this_process() {
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  return cat("pid ", ::getpid(), " on host ", host);
}

int64_t env_ttl() {
  const char *v = std::getenv("PSTATE_ETCD_LEASE_TTL_S");
  if (v == nullptr || *v == '\0') return 3;
  char *end = nullptr;
  long ttl = std::strtol(v, &end, 10);
  if (*end != '\0' || ttl < 2 || ttl > 60)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "PSTATE_ETCD_LEASE_TTL_S='", v,
                "' is not a lease TTL: give whole seconds, 2..60 (etcd grants at least about 2)");
  return ttl;
}

std::string env_or_empty(const char *name) {
  const char *v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

EtcdStore::EtcdStore(const StoreOptions &options, const InitMethod &method, const Logger &logger)
    : options_(options), url_(method.url()), prefix_(method.path + "/"), logger_(logger) {
  for (const auto &e : method.endpoints) config_.endpoints.push_back((method.tls ? "https://" : "http://") + e);
  config_.user = env_or_empty("PSTATE_ETCD_USER");
  config_.password = env_or_empty("PSTATE_ETCD_PASSWORD");
  config_.cacert = env_or_empty("PSTATE_ETCD_CACERT");
  config_.cert = env_or_empty("PSTATE_ETCD_CERT");
  config_.key = env_or_empty("PSTATE_ETCD_KEY");
  config_.name = url_;
  ttl_s_ = env_ttl();
  client_ = std::make_unique<EtcdClient>(config_);
}

std::unique_ptr<EtcdStore> EtcdStore::open(const StoreOptions &options, const InitMethod &method, const Logger &logger) {
  std::unique_ptr<EtcdStore> store(new EtcdStore(options, method, logger));
  store->open_now(Deadline::after_ms(options.timeout_ms));
  return store;
}

EtcdStore::~EtcdStore() { stop_keeper(); }

void EtcdStore::stop_keeper() {
  {
    std::lock_guard<std::mutex> lock(keeper_mutex_);
    keeper_stop_ = true;
  }
  {
    std::lock_guard<std::mutex> lock(departures_mutex_);
    if (departures_client_) departures_client_->interrupt();
  }
  if (departures_.joinable()) departures_.join();
  if (keeper_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(keeper_mutex_);
      keeper_stop_ = true;
    }
    keeper_cv_.notify_all();
    keeper_.join();
  }
}

uint64_t EtcdStore::requests() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return client_->requests() + keeper_requests_.load();
}

void EtcdStore::open_now(Deadline deadline) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int rank = options_.rank;
  logger_.info("store: opening the etcd store ", url_, (rank >= 0 ? cat(" as rank ", rank) : std::string(" as an observer")),
               ", lease TTL ", ttl_s_, " s");
  const std::string meta_key = k("meta");
  Meta mine;
  mine.world_size = options_.world_size;
  mine.token = token_fingerprint(options_.job_token);
  mine.job_id = options_.job_id;
  mine.creator = rank;
  if (rank < 0) {  // an observer checks the job's meta when there is one, claims nothing
    json got = client_->call("/v3/kv/range", range_op(meta_key)["request_range"], deadline, "open");
    if (got.value("kvs", json::array()).empty()) return;
    Meta meta = Meta::parse(value_of(got["kvs"][0]));
    if (meta.token != mine.token)
      throw_error(PSTATE_ERR_AUTH, "job token refused by the store at ", url_,
                  ": set PSTATE_JOB_TOKEN to the job's token (the observer's differs from the job's)");
    return;
  }
  json grant = client_->call("/v3/lease/grant", json{{"TTL", std::to_string(ttl_s_)}}, deadline, "open: lease grant");
  lease_ = json_i64(grant, "ID");
  ttl_s_ = std::max<int64_t>(json_i64(grant, "TTL"), 1);
  keeper_ = std::thread([this] { keep_alive_loop(); });
  const std::string me = this_process();
  for (int attempt = 0;; ++attempt) {
    // One transaction: the first rank creates meta and claims; every other one reads what it
    // needs to check itself against the job (meta, its rank, who is live, a job failure).
    json txn = {{"compare", json::array({absent(meta_key)})},
                {"success", json::array({put_op(meta_key, mine.text()), put_op(k(cat("rank/", rank)), me, lease_),
                                         put_op(k(cat("joined/", rank)), me)})},
                {"failure", json::array({range_op(meta_key), range_op(k("rank/"), prefix_end(k("rank/")), true),
                                         range_op(k("failed"))})}};
    json answer = client_->call("/v3/kv/txn", txn, deadline, "open");
    if (answer.value("succeeded", false)) {
      if (rank >= options_.world_size)  // the creator is out of range: the job cannot start
        refuse(PSTATE_ERR_MISMATCH, cat("rank ", rank, " is out of range for world_size ", options_.world_size,
                                        " (ranks are 0..", options_.world_size - 1, ")"), true, deadline);
      return;
    }
    json metas = kvs_of(answer, 0);
    if (metas.empty()) continue;  // deleted meanwhile (a reclaim, a last close): try again
    Meta meta = Meta::parse(value_of(metas[0]));
    const int64_t meta_rev = json_i64(metas[0], "mod_revision");
    if (kvs_of(answer, 1).empty() && attempt < 3) {
      // No live rank holds the job: a leftover of a job that was killed. Start afresh.
      logger_.warn("store: ", url_, " holds the state of an earlier job with no live rank (every lease lapsed); "
                   "removing it and starting this job afresh");
      json reclaim = {{"compare", json::array({unchanged(meta_key, meta_rev)})},
                      {"success", json::array({{{"request_delete_range",
                                                 {{"key", base64_encode(prefix_)}, {"range_end", base64_encode(prefix_end(prefix_))}}}}})}};
      client_->call("/v3/kv/txn", reclaim, deadline, "open: reclaim");
      continue;
    }
    if (meta.token != mine.token)
      throw_error(PSTATE_ERR_AUTH, "job token refused by the store at ", url_,
                  ": set PSTATE_JOB_TOKEN to the job's token (every rank of a job exports the same one)");
    if (meta.job_id != mine.job_id)
      throw_error(PSTATE_ERR_MISMATCH, "the store at ", url_, " belongs to job '", meta.job_id, "', not to this job '",
                  mine.job_id, "' (PSTATE_JOB_ID): use another etcd prefix for this job");
    json failed = kvs_of(answer, 2);
    if (!failed.empty()) check_failed(failed);
    if (options_.world_size != meta.world_size)
      refuse(PSTATE_ERR_MISMATCH, cat("rank ", rank, " says world_size ", options_.world_size, ", rank ", meta.creator, " says ",
                                      meta.world_size, " (it opened the store first)"), true, deadline);
    if (rank >= options_.world_size)
      refuse(PSTATE_ERR_MISMATCH, cat("rank ", rank, " is out of range for world_size ", options_.world_size,
                                      " (ranks are 0..", options_.world_size - 1, ")"), true, deadline);
    claim_rank(deadline);
    return;
  }
}

// Claims PREFIX/rank/R with this rank's lease. A live holder gets its lease's TTL + 1 s to lapse
// (a replacement of a dead rank), then the claim is refused naming it.
void EtcdStore::claim_rank(Deadline deadline) {
  const std::string key = k(cat("rank/", options_.rank));
  const std::string me = this_process();
  Deadline lapse = Deadline::after_ms(std::min<int64_t>(deadline.remaining_ms(), ttl_s_ * 1000 + 1000));
  for (;;) {
    json txn = {{"compare", json::array({absent(key)})},
                {"success", json::array({put_op(key, me, lease_), put_op(k(cat("joined/", options_.rank)), me)})},
                {"failure", json::array({range_op(key)})}};
    json answer = client_->call("/v3/kv/txn", txn, deadline, "open: claim");
    if (answer.value("succeeded", false)) return;
    json holder = kvs_of(answer, 0);
    if (holder.empty()) continue;
    std::string who = value_of(holder[0]);
    if (lapse.expired())
      refuse(PSTATE_ERR_MISMATCH, cat("rank ", options_.rank, " is already taken by another process (", who,
                                      "), which still renews its etcd lease (two processes started as the same rank?)"),
             true, deadline);
    const int64_t rev = json_i64(answer["header"], "revision");
    client_->watch({{"key", base64_encode(key)}, {"start_revision", std::to_string(rev + 1)}}, lapse,
                   [](const json &result) {
                     for (const auto &ev : result.value("events", json::array()))
                       if (ev.value("type", "PUT") == "DELETE") return true;
                     return false;
                   });
  }
}

void EtcdStore::refuse(pstate_status_t status, const std::string &why, bool member, Deadline deadline) {
  if (member && options_.world_size > 0) {
    try {
      json joined = client_->call("/v3/kv/range", range_op(k("joined/"), prefix_end(k("joined/")), true)["request_range"],
                                  deadline, "open");
      if (static_cast<int>(joined.value("kvs", json::array()).size()) < options_.world_size) {
        std::string text = cat("status ", static_cast<int>(status), "\n", std::string(wire::kJobFailedPrefix),
                               "the store refused rank ", options_.rank, " (", this_process(), "): ", why);
        json txn = {{"compare", json::array({absent(k("failed"))})}, {"success", json::array({put_op(k("failed"), text)})}};
        client_->call("/v3/kv/txn", txn, deadline, "open");
      }
    } catch (const Error &) {
      // the refusal below still says it; the others will time out naming this rank
    }
  }
  if (lease_) {
    try {
      client_->call("/v3/lease/revoke", json{{"ID", std::to_string(lease_)}}, Deadline::after_ms(1000), "open");
    } catch (const Error &) {
    }
  }
  throw_error(status, "store ", url_, ": ", why);
}

void EtcdStore::check_failed(const json &kvs) {
  if (kvs.empty()) return;
  std::string text = value_of(kvs[0]);
  int status = PSTATE_ERR_MISMATCH;
  size_t nl = text.find('\n');
  if (text.rfind("status ", 0) == 0 && nl != std::string::npos) {
    status = std::atoi(text.c_str() + 7);
    text = text.substr(nl + 1);
  }
  if (status <= PSTATE_OK || status > PSTATE_ERR_INTERNAL) status = PSTATE_ERR_MISMATCH;
  throw_error(static_cast<pstate_status_t>(status), text, " (told by the store at ", url_, ")");
}

void EtcdStore::keep_alive_loop() {
  // A client of its own: the store's may be blocked in a long watch.
  std::unique_ptr<EtcdClient> client;
  try {
    client = std::make_unique<EtcdClient>(config_);
  } catch (const Error &e) {
    logger_.warn("store: ", url_, ": cannot renew this rank's etcd lease: ", e.what());
    return;
  }
  const auto period = std::chrono::milliseconds(ttl_s_ * 1000 / 3);
  bool outage = false;
  std::unique_lock<std::mutex> lock(keeper_mutex_);
  while (!keeper_cv_.wait_for(lock, period, [&] { return keeper_stop_; })) {
    lock.unlock();
    try {
      // Up to two periods, a short try per endpoint: a member that hangs (restarting, cut off)
      // costs a fraction of the TTL, and the next member renews in time.
      json answer = client->call("/v3/lease/keepalive", json{{"ID", std::to_string(lease_)}},
                                 Deadline::after_ms(2 * period.count()), "renew the lease",
                                 std::max<int64_t>(period.count() / 2, 200));
      const json &result = answer.value("result", answer);
      if (json_i64(result, "TTL") <= 0) {
        logger_.warn("store: rank ", options_.rank, "'s etcd lease on ", url_,
                     " expired (etcd was out of reach for longer than its TTL of ", ttl_s_,
                     " s): the other ranks take this rank for dead");
        keeper_requests_ += client->requests();
        return;
      }
      if (outage) logger_.info("store: etcd at ", url_, " renews this rank's lease again");
      outage = false;
    } catch (const Error &e) {
      if (!outage) logger_.warn("store: cannot renew this rank's etcd lease: ", e.what());
      outage = true;
    }
    lock.lock();
  }
  keeper_requests_ += client->requests();
}

void EtcdStore::require_open(const char *call) const {
  if (closed_) throw_error(PSTATE_ERR_INVALID_STATE, call, ": the store at ", url_, " was closed by this rank");
}

void EtcdStore::set(const std::string &key, const Bytes &value, Deadline deadline) {
  validate_key(key);
  validate_value(key, value);
  std::lock_guard<std::mutex> lock(mutex_);
  require_open("set");
  json put = put_op(user_key(key), text_of(value))["request_put"];
  client_->call("/v3/kv/put", put, deadline, cat("set(", quote_key(key), ")"));
}

bool EtcdStore::await(const std::vector<std::string> &keys, Deadline deadline, const std::string &what,
                      std::vector<std::string> *values, std::vector<std::string> *missing) {
  values->assign(keys.size(), std::string());
  std::vector<bool> have(keys.size(), false);
  const auto start = Clock::now();
  auto last_log = start;
  for (;;) {
    // Read what is missing (and the job's failure) in transactions of up to kMaxOpsPerTxn ranges;
    // the watch starts after the oldest revision read.
    std::vector<size_t> todo;
    for (size_t i = 0; i < keys.size(); ++i)
      if (!have[i]) todo.push_back(i);
    int64_t revision = INT64_MAX;
    for (size_t first = 0; first == 0 || first < todo.size(); first += kMaxOpsPerTxn) {
      json ops = json::array({range_op(k("failed"))});
      size_t last = std::min(todo.size(), first + kMaxOpsPerTxn);
      for (size_t j = first; j < last; ++j) ops.push_back(range_op(keys[todo[j]]));
      // A key that arrived as the deadline passes still gets its read (half a second at most).
      Deadline read = deadline.remaining_ms() < 500 ? Deadline::after_ms(500) : deadline;
      json answer = client_->call("/v3/kv/txn", json{{"success", ops}}, read, what);
      revision = std::min(revision, json_i64(answer["header"], "revision"));
      check_failed(kvs_of(answer, 0));
      for (size_t j = first; j < last; ++j) {
        json kvs = kvs_of(answer, j - first + 1);
        if (!kvs.empty()) have[todo[j]] = true, (*values)[todo[j]] = value_of(kvs[0]);
      }
      if (todo.empty()) break;
    }
    std::set<std::string> wanted{k("failed")};
    missing->clear();
    for (size_t i = 0; i < keys.size(); ++i)
      if (!have[i]) wanted.insert(keys[i]), missing->push_back(keys[i]);
    if (missing->empty()) return true;
    if (deadline.expired()) return false;
    if (ms_since(last_log) >= kProgressLogMs) {
      last_log = Clock::now();
      logger_.info("store: ", what, " still waiting after ", ms_since(start), " ms for ", missing->size(),
                   " keys; ", absent_ranks(Deadline::after_ms(1000)));
    }
    Deadline slice = Deadline::after_ms(std::min<int64_t>(kWatchSliceMs, deadline.remaining_ms()));
    json create = {{"key", base64_encode(prefix_)},
                   {"range_end", base64_encode(prefix_end(prefix_))},
                   {"start_revision", std::to_string(revision + 1)},
                   {"filters", json::array({"NODELETE"})}};
    bool woke = client_->watch(create, slice, [&](const json &result) {
      for (const auto &ev : result.value("events", json::array()))
        if (wanted.count(key_of(ev.value("kv", json::object())))) return true;
      return false;
    });
    if (!woke && deadline.expired()) return false;
  }
}

// "ranks 2 and 3 of 0..3 never connected; rank 1 joined and left (closed, or the etcd lease
// lapsed)", or "" when every rank is here.
std::string EtcdStore::absent_ranks(Deadline deadline) {
  if (options_.world_size <= 0) return "";
  try {
    json txn = {{"success", json::array({range_op(k("joined/"), prefix_end(k("joined/")), true),
                                         range_op(k("rank/"), prefix_end(k("rank/")), true)})}};
    json answer = client_->call("/v3/kv/txn", txn, deadline, "who is absent");
    std::set<int> joined, live;
    for (const auto &kv : kvs_of(answer, 0)) joined.insert(std::atoi(key_of(kv).substr(k("joined/").size()).c_str()));
    for (const auto &kv : kvs_of(answer, 1)) live.insert(std::atoi(key_of(kv).substr(k("rank/").size()).c_str()));
    std::vector<int> never, gone;
    for (int r = 0; r < options_.world_size; ++r) {
      if (r == options_.rank || live.count(r)) continue;
      (joined.count(r) ? gone : never).push_back(r);
    }
    std::string of = cat(" of 0..", options_.world_size - 1), text;
    if (!never.empty()) text = ranks_phrase(never, never.size()) + of + " never connected";
    if (!gone.empty())
      text += (text.empty() ? ranks_phrase(gone, gone.size()) + of : "; " + ranks_phrase(gone, gone.size())) +
              " joined and left (closed, or the etcd lease lapsed)";
    return text;
  } catch (const Error &e) {
    return cat("who is absent is unknown (", e.what(), ")");
  }
}

Bytes EtcdStore::get(const std::string &key, Deadline deadline) {
  validate_key(key);
  std::lock_guard<std::mutex> lock(mutex_);
  require_open("get");
  const auto start = Clock::now();
  const std::string what = cat("get(", quote_key(key), ")");
  std::vector<std::string> values, missing;
  if (!await({user_key(key)}, deadline, what, &values, &missing)) {
    std::string absent = absent_ranks(Deadline::after_ms(1000));
    throw_error(PSTATE_ERR_TIMEOUT, what, " on the store at ", url_, " timed out after ", ms_since(start), " ms",
                absent.empty() ? std::string() : ": " + absent, " (waiting for key ", quote_key(key),
                ": did the rank that sets it fail or not start?)");
  }
  return bytes_of(values[0]);
}

void EtcdStore::wait(const std::vector<std::string> &keys, Deadline deadline) {
  for (const auto &key : keys) validate_key(key);
  std::lock_guard<std::mutex> lock(mutex_);
  require_open("wait");
  const auto start = Clock::now();
  const std::string what = cat("wait(", quote_keys(keys, keys.size(), 3), ")");
  std::vector<std::string> full, values, missing;
  for (const auto &key : keys) full.push_back(user_key(key));
  if (!await(full, deadline, what, &values, &missing)) {
    for (auto &m : missing) m = m.substr(prefix_.size() + 3);
    std::string absent = absent_ranks(Deadline::after_ms(1000));
    throw_error(PSTATE_ERR_TIMEOUT, what, " on the store at ", url_, " timed out after ", ms_since(start), " ms: ",
                absent.empty() ? std::string() : absent + " (", missing.size(), " of ", keys.size(),
                " keys never set: ", quote_keys(missing, missing.size()), absent.empty() ? "" : ")");
  }
}

int64_t EtcdStore::add(const std::string &key, int64_t delta, Deadline deadline) {
  validate_key(key);
  std::lock_guard<std::mutex> lock(mutex_);
  require_open("add");
  const std::string full = user_key(key), what = cat("add(", quote_key(key), ")");
  // Compare-and-set: read the value and its revision, write value + delta if the key did not
  // change meanwhile; one transaction that also returns the current value when it did.
  json current = client_->call("/v3/kv/range", range_op(full)["request_range"], deadline, what).value("kvs", json::array());
  for (;;) {
    int64_t value = 0;
    json compare;
    if (current.empty()) {
      compare = absent(full);
    } else {
      std::string text = value_of(current[0]);
      if (!counter_from_bytes(bytes_of(text), &value))
        throw_error(PSTATE_ERR_INVALID_ARGUMENT, what, " on the store at ", url_, ": the key holds ", text.size(),
                    " bytes that are not a decimal integer");
      compare = unchanged(full, json_i64(current[0], "mod_revision"));
    }
    int64_t next = 0;
    if (__builtin_add_overflow(value, delta, &next))
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, what, ": ", value, " + ", delta, " overflows int64");
    json txn = {{"compare", json::array({compare})},
                {"success", json::array({put_op(full, std::to_string(next))})},
                {"failure", json::array({range_op(full)})}};
    json answer = client_->call("/v3/kv/txn", txn, deadline, what);
    if (answer.value("succeeded", false)) return next;
    current = kvs_of(answer, 0);
  }
}

Bytes EtcdStore::set_if_absent(const std::string &key, const Bytes &value, Deadline deadline) {
  validate_key(key);
  validate_value(key, value);
  std::lock_guard<std::mutex> lock(mutex_);
  require_open("set_if_absent");
  const std::string full = user_key(key);
  json txn = {{"compare", json::array({absent(full)})},
              {"success", json::array({put_op(full, text_of(value))})},
              {"failure", json::array({range_op(full)})}};
  json answer = client_->call("/v3/kv/txn", txn, deadline, cat("set_if_absent(", quote_key(key), ")"));
  if (answer.value("succeeded", false)) return value;
  json kvs = kvs_of(answer, 0);
  return kvs.empty() ? value : bytes_of(value_of(kvs[0]));  // empty: erased meanwhile
}

bool EtcdStore::check(const std::string &key, Deadline deadline) {
  validate_key(key);
  std::lock_guard<std::mutex> lock(mutex_);
  require_open("check");
  json r = range_op(user_key(key), "", true)["request_range"];
  r["count_only"] = true;
  return json_i64(client_->call("/v3/kv/range", r, deadline, cat("check(", quote_key(key), ")")), "count") > 0;
}

bool EtcdStore::erase(const std::string &key, Deadline deadline) {
  validate_key(key);
  std::lock_guard<std::mutex> lock(mutex_);
  require_open("erase");
  json answer = client_->call("/v3/kv/deleterange", json{{"key", base64_encode(user_key(key))}}, deadline,
                              cat("erase(", quote_key(key), ")"));
  return json_i64(answer, "deleted") > 0;
}

void EtcdStore::abandon(pstate_status_t status, const std::string &why) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string text = cat("status ", static_cast<int>(status), "\n", wire::kJobFailedPrefix, "rank ", options_.rank,
                           " gave up: ", why);
    json txn = {{"compare", json::array({absent(k("failed"))})}, {"success", json::array({put_op(k("failed"), text)})}};
    client_->call("/v3/kv/txn", txn, Deadline::after_ms(1000), "abandon");
  } catch (const std::exception &) {
    // the others will time out, naming this rank
  }
}

std::optional<std::vector<int>> EtcdStore::members(Deadline deadline) {
  std::lock_guard<std::mutex> lock(mutex_);
  require_open("members");
  json r = range_op(k("rank/"), prefix_end(k("rank/")), true)["request_range"];
  json answer = client_->call("/v3/kv/range", r, deadline, "members (the ranks with a live etcd lease)");
  std::vector<int> ranks;
  for (const auto &kv : answer.value("kvs", json::array()))
    ranks.push_back(std::atoi(key_of(kv).substr(k("rank/").size()).c_str()));
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

void EtcdStore::interrupt() noexcept { client_->interrupt(); }

void EtcdStore::await_change() {
  std::lock_guard<std::mutex> lock(mutex_);
  require_open("await_change");
  const int64_t since = client_->last_revision();
  json create = {{"key", base64_encode(prefix_)},
                 {"range_end", base64_encode(prefix_end(prefix_))},
                 {"start_revision", std::to_string(since + 1)}};
  client_->watch(create, Deadline::after_ms(250), [](const json &result) {
    return !result.value("events", json::array()).empty();
  });
}

void EtcdStore::watch_departures(std::function<void(int rank, bool gone)> on_change) {
  if (departures_.joinable() || !on_change) return;
  // The revision to watch from is read here, before returning, so that every change after this
  // call is told (a claim made while the watcher thread starts is not missed); 0 when the read
  // fails: the thread reads it again.
  int64_t start = 0;
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string ranks = k("rank/");
    json r = range_op(ranks, prefix_end(ranks), true)["request_range"];
    r["count_only"] = true;
    start = json_i64(client_->call("/v3/kv/range", r, Deadline::after_ms(4000), "watch the leases")["header"],
                     "revision");
  } catch (const Error &) {
    start = 0;
  }
  departures_ = std::thread([this, fn = std::move(on_change), start] { departures_loop(fn, start); });
}

void EtcdStore::departures_loop(std::function<void(int, bool)> on_change, int64_t start_revision) {
  std::unique_ptr<EtcdClient> client;
  try {
    client = std::make_unique<EtcdClient>(config_);
  } catch (const Error &e) {
    logger_.warn("store: ", url_, ": cannot watch the ranks' leases: ", e.what());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(departures_mutex_);
    std::lock_guard<std::mutex> stop_lock(keeper_mutex_);
    if (keeper_stop_) return;
    departures_client_ = client.get();
  }
  const std::string ranks = k("rank/");
  int64_t revision = start_revision;  // watched up to here; 0: read the current revision first
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(keeper_mutex_);
      if (keeper_stop_) break;
    }
    try {
      // A read first, every slice: it fails over past a member that went silent (a dead host
      // leaves a watch on it quiet, not broken), so the watch below runs on one that answers.
      json r = range_op(ranks, prefix_end(ranks), true)["request_range"];
      r["count_only"] = true;
      int64_t now = json_i64(client->call("/v3/kv/range", r, Deadline::after_ms(4000), "watch the leases")["header"],
                             "revision");
      if (revision == 0) revision = now;
      json create = {{"key", base64_encode(ranks)},
                     {"range_end", base64_encode(prefix_end(ranks))},
                     {"start_revision", std::to_string(revision + 1)}};
      bool cancelled = !client->watch(create, Deadline::after_ms(kWatchSliceMs), [&](const json &result) {
        for (const auto &ev : result.value("events", json::array())) {
          const json &kv = ev.value("kv", json::object());
          revision = std::max(revision, json_i64(kv, "mod_revision"));
          int rank = std::atoi(key_of(kv).substr(ranks.size()).c_str());
          bool gone = ev.value("type", "PUT") == "DELETE";
          if (gone) logger_.info("store: rank ", rank, "'s etcd lease is gone (its process or host ended)");
          on_change(rank, gone);
        }
        return false;
      });
      (void)cancelled;
    } catch (const Error &e) {
      if (e.status() == PSTATE_ERR_ABORTED) break;
      revision = 0;  // re-read after an outage (a compaction, a lost member)
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  std::lock_guard<std::mutex> lock(departures_mutex_);
  departures_client_ = nullptr;
}

bool EtcdStore::close(Deadline deadline) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) return true;
  closed_ = true;
  if (lease_ == 0) return true;
  stop_keeper();
  bool ok = true;
  try {
    client_->call("/v3/lease/revoke", json{{"ID", std::to_string(lease_)}}, deadline, "close");
    // The last rank of the world out removes the job's keys (a compare-and-set count).
    const std::string left = k("left");
    json current = client_->call("/v3/kv/range", range_op(left)["request_range"], deadline, "close").value("kvs", json::array());
    for (;;) {
      int64_t n = current.empty() ? 0 : std::atoll(value_of(current[0]).c_str());
      json compare = current.empty() ? absent(left) : unchanged(left, json_i64(current[0], "mod_revision"));
      json txn = {{"compare", json::array({compare})},
                  {"success", json::array({put_op(left, std::to_string(n + 1))})},
                  {"failure", json::array({range_op(left)})}};
      json answer = client_->call("/v3/kv/txn", txn, deadline, "close");
      if (!answer.value("succeeded", false)) {
        current = kvs_of(answer, 0);
        continue;
      }
      if (n + 1 >= options_.world_size)
        client_->call("/v3/kv/deleterange",
                      json{{"key", base64_encode(prefix_)}, {"range_end", base64_encode(prefix_end(prefix_))}}, deadline,
                      "close: remove the job's keys");
      break;
    }
  } catch (const Error &e) {
    logger_.warn("store: closing ", url_, ": ", e.what());
    ok = false;
  }
  logger_.info("store: closed ", url_, " after ", client_->requests() + keeper_requests_.load(),
               " requests to etcd (lease renewals included)");
  return ok;
}

}  // namespace pstate
