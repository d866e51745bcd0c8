// etcd_store.cpp — the store on etcd (see etcd_store.hpp for the layout, leases and watches).
#include "bootstrap/etcd_store.hpp"

#include "bootstrap/roster.hpp"
#include "common/error.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <set>

namespace pstate {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr size_t kMaxOpsPerTxn = 100;  // etcd's --max-txn-ops is 128 by default
constexpr int64_t kWatchSliceMs = 2000;  // a wait re-reads (failover, quorum, progress) this often
constexpr int64_t kProgressLogMs = 5000;

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

json range_op(const std::string &key, const std::string &end = "", bool keys_only = false, int64_t limit = 0) {
  json r = {{"key", base64_encode(key)}};
  if (!end.empty()) r["range_end"] = base64_encode(end);
  if (keys_only) r["keys_only"] = true;
  if (limit > 0) r["limit"] = std::to_string(limit);
  return {{"request_range", r}};
}

// The claims read to judge a job on a prefix: a few holders to name, and the count (a world of
// thousands costs each opening rank a few hundred bytes, not every claim).
constexpr int64_t kHoldersShown = 4;

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

// The count of the i-th response of a transaction (a count_only range).
int64_t count_of(const json &txn, size_t i) {
  const json &responses = txn.value("responses", json::array());
  if (i >= responses.size()) return 0;
  return json_i64(responses[i].value("response_range", json::object()), "count");
}

json count_op(const std::string &key, const std::string &end) {
  json r = range_op(key, end, true);
  r["request_range"]["count_only"] = true;
  return r;
}

// A compare that holds when no key in [key, end) exists (etcd compares every key of a range; an
// empty range compares as one key never created).
json none_in(const std::string &key, const std::string &end) {
  return {{"key", base64_encode(key)}, {"range_end", base64_encode(end)}, {"target", "CREATE"}, {"result", "EQUAL"},
          {"create_revision", "0"}};
}

json created_at(const std::string &key, int64_t create_revision) {
  return {{"key", base64_encode(key)}, {"target", "CREATE"}, {"result", "EQUAL"},
          {"create_revision", std::to_string(create_revision)}};
}

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
}

std::string key_of(const json &kv) { return base64_decode(kv.value("key", "")); }
std::string value_of(const json &kv) { return base64_decode(kv.value("value", "")); }

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

// What the open transaction read when the meta existed already (its failure branch).
struct EtcdStore::Found {
  JobMeta meta;
  int64_t meta_mod = 0, meta_created = 0;  // the meta's revisions
  json live;                               // some of ROOT/rank/* with values (holders)
  int64_t live_count = 0;                  // how many claims there are
  json mine;                               // ROOT/rank/<this rank>
  json failed;                             // ROOT/failed
  bool joined_before = false;              // ROOT/joined/<this rank> exists
  int64_t joined = 0, left = 0;            // ranks that joined, clean closes
};

EtcdStore::EtcdStore(const StoreOptions &options, const InitMethod &method, const Logger &logger)
    : options_(options), url_(method.url()), path_(method.path), prefix_(method.path + "/@/"), logger_(logger) {
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

std::unique_ptr<EtcdStore> EtcdStore::open_unconnected(const StoreOptions &options, const InitMethod &method,
                                                       const Logger &logger) {
  return std::unique_ptr<EtcdStore>(new EtcdStore(options, method, logger));
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
  JobMeta mine;
  mine.world_size = options_.world_size;
  mine.token = token_fingerprint(options_.job_token, MetaDialect::kEtcdStore);
  mine.job_id = options_.job_id;
  mine.creator_rank = rank;
  mine.ttl_s = ttl_s_;
  if (rank < 0) {  // an observer checks the job's meta when there is one, claims nothing
    json got = client_->call("/v3/kv/range", range_op(meta_key)["request_range"], deadline, "open");
    if (got.value("kvs", json::array()).empty()) return;
    JobMeta meta;
    decode_job_meta(value_of(got["kvs"][0]), MetaDialect::kEtcdStore, &meta);
    if (meta.token != mine.token)
      throw_error(PSTATE_ERR_AUTH, "job token refused by the store at ", url_, ": the job on prefix '", path_,
                  "' has another token; set PSTATE_JOB_TOKEN to the job's token (the observer's differs from the job's)");
    return;
  }
  json grant = client_->call("/v3/lease/grant", json{{"TTL", std::to_string(ttl_s_)}}, deadline, "open: lease grant");
  lease_ = json_i64(grant, "ID");
  ttl_s_ = std::max<int64_t>(json_i64(grant, "TTL"), 1);
  renewed_ms_ = steady_ms();
  keeper_ = std::thread([this] { keep_alive_loop(); });
  const std::string me = this_process();
  const std::string ranks = k("rank/"), joined = k("joined/");
  for (int round = 0;; ++round) {
    // One transaction: the first rank creates meta and claims; every other one reads what it
    // needs to check itself against the job (meta, who is live, a job failure, whether this rank
    // joined it before, how many joined and left).
    json answer = txn_with_lease(
        [&](int64_t lease) {
          return json{{"compare", json::array({absent(meta_key)})},
                      {"success", json::array({put_op(meta_key, encode_job_meta(mine, MetaDialect::kEtcdStore)), put_op(k(cat("rank/", rank)), me, lease),
                                               put_op(k(cat("joined/", rank)), me)})},
                      {"failure", json::array({range_op(meta_key), range_op(ranks, prefix_end(ranks), false, kHoldersShown),
                                               range_op(k("failed")), range_op(k(cat("joined/", rank)), "", true),
                                               count_op(joined, prefix_end(joined)), range_op(k("left")),
                                               range_op(k(cat("rank/", rank)))})}};
        },
        deadline, "open");
    if (answer.value("succeeded", false)) {
      meta_created_ = json_i64(answer["header"], "revision");
      claimed_ = true;
      if (rank >= options_.world_size)  // the creator is out of range: the job cannot start
        refuse(PSTATE_ERR_MISMATCH, cat("rank ", rank, " is out of range for world_size ", options_.world_size,
                                        " (ranks are 0..", options_.world_size - 1, ")"), true, deadline);
      return;
    }
    json metas = kvs_of(answer, 0);
    if (metas.empty()) continue;  // deleted meanwhile (a removal, a last close): try again
    Found found;
    decode_job_meta(value_of(metas[0]), MetaDialect::kEtcdStore, &found.meta);
    found.meta_mod = json_i64(metas[0], "mod_revision");
    found.meta_created = json_i64(metas[0], "create_revision");
    found.live = kvs_of(answer, 1);
    found.live_count = count_of(answer, 1);
    found.mine = kvs_of(answer, 6);
    found.failed = kvs_of(answer, 2);
    found.joined_before = !kvs_of(answer, 3).empty();
    found.joined = count_of(answer, 4);
    json left = kvs_of(answer, 5);
    found.left = left.empty() ? 0 : std::atoll(value_of(left[0]).c_str());
    pstate_status_t status = PSTATE_OK;
    std::string kind;
    const std::string foreign = foreign_job(found, &status, &kind);
    if (!foreign.empty() || found.live.empty()) {
      // Not a job this process can join, or one with no live rank: wait until it is over (then
      // remove it and start afresh) or proves to be running.
      if (round >= 8)
        throw_error(PSTATE_ERR_TIMEOUT, "store ", url_, ": the prefix '", path_, "' kept changing while this rank ",
                    "opened it (jobs starting and ending on it at once?)");
      Verdict v = await_job_over(found, !foreign.empty(), deadline);
      if (v == Verdict::kChanged) continue;
      if (v == Verdict::kOver) {
        remove_leftover(found, kind, deadline);
        continue;
      }
      if (!foreign.empty()) refuse(status, foreign, false, deadline);
      continue;  // no live rank at first, running now (its leases came back): join it
    }
    if (!found.failed.empty()) check_failed(found.failed);
    if (options_.world_size != found.meta.world_size)
      refuse(PSTATE_ERR_MISMATCH, cat("rank ", rank, " says world_size ", options_.world_size, ", rank ", found.meta.creator_rank,
                                      " says ", found.meta.world_size, " (it opened the store first)"), true, deadline);
    if (rank >= options_.world_size)
      refuse(PSTATE_ERR_MISMATCH, cat("rank ", rank, " is out of range for world_size ", options_.world_size,
                                      " (ranks are 0..", options_.world_size - 1, ")"), true, deadline);
    meta_created_ = found.meta_created;
    claim_rank(deadline);
    return;
  }
}

// "rank 0 (pid 12 on host a), rank 1 (pid 13 on host a) and 6 more": who holds the claims
// (rank_kvs: some of them; total: how many there are).
std::string EtcdStore::holders_phrase(const json &rank_kvs, int64_t total) const {
  std::string out;
  int64_t n = 0;
  for (const auto &kv : rank_kvs)
    out += cat(n++ ? ", " : "", "rank ", key_of(kv).substr(k("rank/").size()), " (", value_of(kv), ")");
  if (total > n) out += cat(" and ", total - n, " more");
  return out;
}

std::string EtcdStore::foreign_job(const Found &found, pstate_status_t *status, std::string *kind) const {
  const std::string on = cat("the prefix '", path_, "' holds a job");
  const std::string holders = holders_phrase(found.live, found.live_count);
  const std::string running = found.live.empty()      ? std::string(" whose ranks' etcd leases lapsed")
                              : found.live_count == 1 ? cat(" still running (", holders, " renews its etcd lease)")
                                                      : cat(" still running (", holders, " renew their etcd leases)");
  if (found.meta.token != token_fingerprint(options_.job_token, MetaDialect::kEtcdStore)) {
    *status = PSTATE_ERR_AUTH;
    *kind = "its job token differs from this process's";
    return cat("job token refused by the store at ", url_, ": ", on, " ('", found.meta.job_id, "')", running,
               " whose job token differs from this process's. If this process belongs to that job, set "
               "PSTATE_JOB_TOKEN to the job's token (every rank of a job exports the same one); if it is another "
               "job, give it a prefix of its own: two jobs cannot share one");
  }
  if (found.meta.job_id != options_.job_id) {
    *status = PSTATE_ERR_MISMATCH;
    *kind = cat("it is job '", found.meta.job_id, "', this process is of job '", options_.job_id, "'");
    return cat("the store at ", url_, " belongs to job '", found.meta.job_id, "', not to this job '", options_.job_id,
               "' (PSTATE_JOB_ID): ", on, running, "; give this job a prefix of its own (two jobs cannot share one)");
  }
  if (found.joined_before && !options_.rejoin) {
    *status = PSTATE_ERR_MISMATCH;
    *kind = cat("rank ", options_.rank, " had joined it: an earlier run of this job");
    if (!found.mine.empty())
      return cat("rank ", options_.rank, " is already taken by another process (", value_of(found.mine[0]),
                 ") on prefix '", path_, "', which still renews its etcd lease: two processes started as the same "
                 "rank, or one job started twice on one prefix (give each job its own)");
    return cat("rank ", options_.rank, " joined the job on prefix '", path_, "' before, and ", on, running,
               ": a process that replaces a dead rank of a running job sets PSTATE_REJOIN=1 (`pstate run --respawn` "
               "does); a new run of a job needs the old run ended (its leases lapse within ",
               found.meta.ttl_s > 0 ? found.meta.ttl_s : ttl_s_, " s of its end) or a prefix of its own");
  }
  return "";
}

// The job in `found` is foreign (its live leases must lapse first) or has no live rank. Reads
// ROOT's meta and claims every 250 ms (watching ROOT/rank/ between reads) until:
//  - the meta changed (another rank removed the job or made a new one): kChanged;
//  - no rank holds a lease, and the job provably ended: every rank that joined it closed, or its
//    leases were seen to lapse while etcd answered promptly: kOver; otherwise (the claims were
//    gone when this rank came, or etcd was slow to answer meanwhile: an etcd stall revokes every
//    lease it could not renew) no claim came back within the job's TTL and a second: kOver; one
//    did: a job whose leases lapsed in an etcd stall and came back, kChanged (join it);
//  - a foreign job's leases outlived their TTL and a second: kRunning.
EtcdStore::Verdict EtcdStore::await_job_over(const Found &found, bool foreign, Deadline deadline) {
  const std::string ranks = k("rank/");
  const int64_t ttl_ms = (found.meta.ttl_s > 0 ? found.meta.ttl_s : ttl_s_) * 1000;
  const auto start = Clock::now();
  Deadline lapse = Deadline::after_ms(std::min<int64_t>(deadline.remaining_ms(), ttl_ms + 1000));
  bool seen_live = !found.live.empty(), stalled = false, logged = false;
  std::optional<Deadline> comeback;  // the grace for claims to come back, once none is left
  json live = found.live;
  int64_t live_count = found.live_count;
  int64_t revision = 0;
  for (;;) {
    if (live.empty()) {
      if (found.left >= found.joined || (seen_live && !stalled)) return Verdict::kOver;
      if (!comeback) {
        comeback = Deadline::after_ms(std::min<int64_t>(deadline.remaining_ms(), ttl_ms + 1000));
        logger_.info("store: the job on prefix '", path_, "' at ", url_, " has no live rank (", found.joined,
                     " joined, ", found.left, " left cleanly); waiting ", ttl_ms + 1000,
                     " ms for its ranks to claim their leases again (an etcd stall) before taking it for a leftover");
      }
      if (comeback->expired()) {
        if (deadline.expired())
          throw_error(PSTATE_ERR_TIMEOUT, "store ", url_, ": the prefix '", path_,
                      "' holds a job with no live rank, and this rank's deadline passed while it waited for that "
                      "job's ranks to claim their leases again (an etcd stall) before taking it for a leftover");
        return Verdict::kOver;
      }
    } else if (foreign && lapse.expired()) {
      return Verdict::kRunning;
    } else if (!foreign) {
      return Verdict::kChanged;  // claims came back: a running job, this rank joins it
    } else if (!logged) {
      logged = true;
      logger_.info("store: the prefix '", path_, "' at ", url_, " holds a job this process cannot join (",
                   holders_phrase(live, live_count), " hold etcd leases); waiting up to ", ttl_ms + 1000,
                   " ms for them to lapse (a job that ended moments ago)");
    }
    // Wait for a change under ROOT/rank/ (at most 250 ms), then read the meta and the claims.
    if (revision > 0) {
      json create = {{"key", base64_encode(ranks)},
                     {"range_end", base64_encode(prefix_end(ranks))},
                     {"start_revision", std::to_string(revision + 1)}};
      client_->watch(create, Deadline::after_ms(250), [](const json &r) { return !r.value("events", json::array()).empty(); });
    }
    json txn = {{"success", json::array({range_op(k("meta")), range_op(ranks, prefix_end(ranks), false, kHoldersShown)})}};
    const auto asked = Clock::now();
    json answer = client_->call("/v3/kv/txn", txn, Deadline::after_ms(std::max<int64_t>(deadline.remaining_ms(), 1000)),
                                "open: is the job on the prefix over?");
    if (ms_since(asked) > 1000) stalled = true;  // etcd was slow: a stall may have revoked live leases
    revision = json_i64(answer["header"], "revision");
    json metas = kvs_of(answer, 0);
    if (metas.empty() || json_i64(metas[0], "mod_revision") != found.meta_mod) return Verdict::kChanged;
    json now_live = kvs_of(answer, 1);
    live_count = count_of(answer, 1);
    if (!now_live.empty() && live.empty()) {
      logger_.info("store: the job on prefix '", path_, "' claims its ranks again (", holders_phrase(now_live, live_count), ") after ",
                   ms_since(start), " ms");
      if (!foreign) return Verdict::kChanged;
    }
    seen_live = seen_live || !now_live.empty();
    live = now_live;
  }
}

// Removes a job that is over from ROOT, in one transaction that requires its meta unchanged and
// no rank claimed (a job whose claims came back meanwhile keeps its keys).
void EtcdStore::remove_leftover(const Found &found, const std::string &why, Deadline deadline) {
  const std::string ranks = k("rank/");
  logger_.warn("store: ", url_, ": the prefix '", path_, "' holds an earlier job that is over ('", found.meta.job_id,
               "', ", found.joined, " ranks joined, ", found.left, " left cleanly, no live etcd lease",
               why.empty() ? std::string() : "; " + why,
               "); removing its keys and starting this job afresh");
  json txn = {{"compare", json::array({unchanged(k("meta"), found.meta_mod), none_in(ranks, prefix_end(ranks))})},
              {"success", json::array({{{"request_delete_range",
                                         {{"key", base64_encode(prefix_)}, {"range_end", base64_encode(prefix_end(prefix_))}}}}})}};
  client_->call("/v3/kv/txn", txn, deadline, "open: remove an earlier job's keys");
}

json EtcdStore::txn_with_lease(const std::function<json(int64_t lease)> &make, Deadline deadline, const std::string &what) {
  for (int attempt = 0;; ++attempt) {
    const int64_t lease = lease_.load();
    try {
      return client_->call("/v3/kv/txn", make(lease), deadline, what);
    } catch (const Error &e) {
      // etcd says NOT_FOUND for a put with a lease it revoked: this rank's lapsed in a stall.
      if (e.status() != PSTATE_ERR_TRANSPORT || client_->last_refusal_code() != 5 || attempt >= 3) throw;
      note_lease_lapsed();
      logger_.warn("store: rank ", options_.rank, "'s etcd lease on ", url_, " lapsed while it opened the store (", e.what(),
                   "); taking a new one");
      if (!replace_lapsed_lease(*client_, lease, deadline))
        throw_error(PSTATE_ERR_PEER_LOST, "store ", url_, ": ", lost_why_);
    }
  }
}

// Claims ROOT/rank/R with this rank's lease. A live holder gets its lease's TTL + 1 s to lapse
// (a replacement of a dead rank), then the claim is refused naming it.
void EtcdStore::claim_rank(Deadline deadline) {
  const std::string key = k(cat("rank/", options_.rank));
  const std::string me = this_process();
  Deadline lapse = Deadline::after_ms(std::min<int64_t>(deadline.remaining_ms(), ttl_s_ * 1000 + 1000));
  for (;;) {
    json answer = txn_with_lease(
        [&](int64_t lease) {
          return json{{"compare", json::array({absent(key), created_at(k("meta"), meta_created_)})},
                      {"success", json::array({put_op(key, me, lease), put_op(k(cat("joined/", options_.rank)), me)})},
                      {"failure", json::array({range_op(key), range_op(k("meta"))})}};
        },
        deadline, "open: claim");
    if (answer.value("succeeded", false)) {
      claimed_ = true;
      return;
    }
    json metas = kvs_of(answer, 1);
    if (metas.empty() || json_i64(metas[0], "create_revision") != meta_created_)
      throw_error(PSTATE_ERR_MISMATCH, "store ", url_, ": the job on prefix '", path_,
                  "' ended (its keys were removed) while rank ", options_.rank, " claimed its rank: start the job again");
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
        std::string text = job_failure_record(status, refused_reason(options_.rank, this_process(), why));
        json txn = {{"compare", json::array({absent(k("failed"))})}, {"success", json::array({put_op(k("failed"), text)})}};
        client_->call("/v3/kv/txn", txn, deadline, "open");
      }
    } catch (const Error &) {
      // the refusal below still says it; the others will time out naming this rank
    }
  }
  stop_keeper();
  if (const int64_t lease = lease_.load()) {
    try {
      client_->call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}, Deadline::after_ms(1000), "open");
    } catch (const Error &) {
    }
  }
  if (std::string_view(why).rfind("job token refused", 0) == 0 || std::string_view(why).rfind("the store at", 0) == 0)
    throw_error(status, why);
  throw_error(status, "store ", url_, ": ", why);
}

void EtcdStore::check_failed(const json &kvs) {
  if (!kvs.empty()) throw_job_failure(value_of(kvs[0]), url_);
}

void EtcdStore::note_lease_lapsed() { lapsed_ms_ = steady_ms(); }

// Whether this rank's own lease is in the same trouble a peer's lapse may come from: it lapsed
// within the last TTL and a second, or no renewal got through for two thirds of the TTL (a
// healthy keeper renews every third; etcd revokes a lease it heard nothing of for a whole TTL,
// so a stall that cost a peer its lease kept this rank from renewing for at least that long,
// less the one period by which their renewals may be apart). An observer has no lease: never.
bool EtcdStore::lease_trouble_recent() const {
  if (lease_.load() == 0) return false;
  const int64_t now = steady_ms(), ttl_ms = ttl_s_ * 1000;
  return now - lapsed_ms_.load() <= ttl_ms + 1000 || now - renewed_ms_.load() >= ttl_ms * 2 / 3 - 100;
}

bool EtcdStore::replace_lapsed_lease(EtcdClient &client, int64_t lapsed, Deadline deadline) {
  std::lock_guard<std::mutex> lock(lease_mutex_);
  if (lost_) return false;
  if (lease_.load() != lapsed) return true;  // replaced by the other thread already
  json grant = client.call("/v3/lease/grant", json{{"TTL", std::to_string(ttl_s_)}}, deadline, "grant a new lease");
  const int64_t fresh = json_i64(grant, "ID");
  if (!claimed_) {  // still opening: the open transaction claims with the new lease
    lease_ = fresh;
    renewed_ms_ = steady_ms();
    return true;
  }
  // Claim the rank again, only if its key is free and the job is still the one this rank joined.
  const std::string key = k(cat("rank/", options_.rank)), me = this_process();
  json txn = {{"compare", json::array({absent(key), created_at(k("meta"), meta_created_)})},
              {"success", json::array({put_op(key, me, fresh)})},
              {"failure", json::array({range_op(key), range_op(k("meta"))})}};
  json answer = client.call("/v3/kv/txn", txn, deadline, "claim the rank again with a new lease");
  if (answer.value("succeeded", false)) {
    lease_ = fresh;
    renewed_ms_ = steady_ms();
    logger_.warn("store: rank ", options_.rank, " holds its rank on ", url_, " again, with a new etcd lease");
    return true;
  }
  json holder = kvs_of(answer, 0), metas = kvs_of(answer, 1);
  const bool same_job = !metas.empty() && json_i64(metas[0], "create_revision") == meta_created_;
  if (same_job && !holder.empty() && value_of(holder[0]) == me) {  // an earlier try's claim, answered too late
    try {
      client.call("/v3/lease/revoke", json{{"ID", std::to_string(fresh)}}, Deadline::after_ms(1000), "revoke");
    } catch (const Error &) {
    }
    lease_ = json_i64(holder[0], "lease");
    return true;
  }
  try {
    client.call("/v3/lease/revoke", json{{"ID", std::to_string(fresh)}}, Deadline::after_ms(1000), "revoke");
  } catch (const Error &) {
  }
  lost_why_ = !same_job ? cat("rank ", options_.rank, "'s etcd lease lapsed and meanwhile the job's keys on prefix '", path_,
                              "' were removed (taken for an ended job's): this rank is out of the job; call pstate_abort")
                        : cat("rank ", options_.rank, "'s etcd lease lapsed and meanwhile another process took rank ",
                              options_.rank, " (", holder.empty() ? std::string("?") : value_of(holder[0]),
                              "): this rank is out of the job; call pstate_abort");
  lost_ = true;
  logger_.warn("store: ", url_, ": ", lost_why_);
  return false;
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
  // It never stops while the store is open: whatever etcd does, the next period tries again.
  while (!keeper_cv_.wait_for(lock, period, [&] { return keeper_stop_; })) {
    lock.unlock();
    const int64_t lease = lease_.load();
    try {
      if (lost_) {
        lock.lock();
        continue;  // the rank was taken from it: nothing to renew (lost_why_ was logged)
      }
      // Up to two periods, a short try per endpoint: a member that hangs (restarting, cut off)
      // costs a fraction of the TTL, and the next member renews in time.
      const Deadline deadline = Deadline::after_ms(2 * period.count());
      json answer = client->call("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}, deadline,
                                 "renew the lease", std::max<int64_t>(period.count() / 2, 200));
      const json &result = answer.value("result", answer);
      if (json_i64(result, "TTL") <= 0) {
        note_lease_lapsed();
        logger_.warn("store: rank ", options_.rank, "'s etcd lease on ", url_,
                     " lapsed (etcd did not hear from this rank for longer than its TTL of ", ttl_s_,
                     " s: etcd, or the way to it, stalled); taking a new lease and claiming rank ", options_.rank, " again");
        if (!replace_lapsed_lease(*client, lease, Deadline::after_ms(2 * period.count()))) {
          lock.lock();
          continue;
        }
      } else if (outage) {
        logger_.info("store: etcd at ", url_, " renews this rank's lease again");
      }
      renewed_ms_ = steady_ms();
      outage = false;
    } catch (const Error &e) {
      if (!outage)
        logger_.warn("store: cannot renew rank ", options_.rank, "'s etcd lease (", e.what(), "); trying again every ",
                     period.count(), " ms");
      outage = true;
    }
    lock.lock();
  }
  keeper_requests_ += client->requests();
}

void EtcdStore::require_open(const char *call) const {
  if (closed_) throw_error(PSTATE_ERR_INVALID_STATE, call, ": the store at ", url_, " was closed by this rank");
  if (lost_.load()) {
    std::string why;
    {
      std::lock_guard<std::mutex> lock(lease_mutex_);
      why = lost_why_;
    }
    throw_error(PSTATE_ERR_PEER_LOST, call, " on the store at ", url_, ": ", why);
  }
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
    Deadline slice = Deadline::after_ms(std::min<int64_t>(wait_slice_ms_, deadline.remaining_ms()));
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
    AbsentRanks absent(options_.world_size, {" joined and left (closed, or the etcd lease lapsed)", false});
    for (int r = 0; r < options_.world_size; ++r)
      if (r != options_.rank && !live.count(r)) absent.add(r, joined.count(r) ? Absence::kLeft : Absence::kNeverConnected);
    return absent.describe();
  } catch (const Error &e) {
    return cat("who is absent is unknown (", e.what(), ")");
  }
}

Bytes EtcdStore::get(const std::string &key, Deadline deadline) {
  validate_key(key);
  std::lock_guard<std::mutex> lock(mutex_);
  require_open("get");
  const auto start = Clock::now();
  const bool spent = deadline.expired();
  const std::string what = cat("get(", quote_key(key), ")");
  std::vector<std::string> values, missing;
  if (!await({user_key(key)}, deadline, what, &values, &missing))
    throw_get_timeout(what, url_, waited_for_timeout(start, spent), absent_ranks(Deadline::after_ms(1000)), key);
  return bytes_of(values[0]);
}

void EtcdStore::wait(const std::vector<std::string> &keys, Deadline deadline) {
  for (const auto &key : keys) validate_key(key);
  std::lock_guard<std::mutex> lock(mutex_);
  require_open("wait");
  const auto start = Clock::now();
  const bool spent = deadline.expired();
  const std::string what = cat("wait(", quote_keys(keys, keys.size(), 3), ")");
  std::vector<std::string> full, values, missing;
  for (const auto &key : keys) full.push_back(user_key(key));
  if (!await(full, deadline, what, &values, &missing)) {
    for (auto &m : missing) m = m.substr(prefix_.size() + 3);
    throw_wait_timeout(what, url_, waited_for_timeout(start, spent), absent_ranks(Deadline::after_ms(1000)), missing,
                       missing.size(), keys.size());
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
    std::string text = job_failure_record(status, gave_up_reason(options_.rank, why));
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
  std::set<int> ranks;
  for (const auto &kv : answer.value("kvs", json::array()))
    ranks.insert(std::atoi(key_of(kv).substr(k("rank/").size()).c_str()));
  {
    // A rank whose lease lapsed in an etcd stall is not gone while it may claim its rank again:
    // the lapses held by watch_departures, and while this rank's own lease had trouble, every
    // rank that was live before it.
    std::lock_guard<std::mutex> view(view_mutex_);
    ranks.insert(held_.begin(), held_.end());
    if (lease_trouble_recent()) ranks.insert(believed_.begin(), believed_.end());
  }
  return std::vector<int>(ranks.begin(), ranks.end());
}

void EtcdStore::interrupt() noexcept { client_->interrupt(); }

void EtcdStore::await_change(std::chrono::milliseconds) {
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
  // The claims and the revision to watch from are read here, before returning, so that every
  // change after this call is told (a claim made while the watcher thread starts is not missed);
  // revision 0 when the read fails: the thread reads them again.
  int64_t start = 0;
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string ranks = k("rank/");
    json r = range_op(ranks, prefix_end(ranks), true)["request_range"];
    json answer = client_->call("/v3/kv/range", r, Deadline::after_ms(4000), "watch the leases");
    start = json_i64(answer["header"], "revision");
    std::lock_guard<std::mutex> view(view_mutex_);
    for (const auto &kv : answer.value("kvs", json::array()))
      believed_.insert(std::atoi(key_of(kv).substr(ranks.size()).c_str()));
  } catch (const Error &) {
    start = 0;
  }
  departures_ = std::thread([this, fn = std::move(on_change), start] { departures_loop(fn, start); });
}

// Watches ROOT/rank/ and tells on_change. A DELETE while this rank's own lease had trouble too (an
// etcd-wide stall, which revokes every lease it could not renew) is held for a TTL and a second
// from then: the rank claims its rank again within a renewal period of etcd's return if it lives,
// and only one that does not is told gone. A watch that etcd cancels (its start was compacted),
// and the first read when watch_departures could not read, compare the claims with what this
// thread believed, so no departure is missed across an outage.
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
  const auto hold = std::chrono::milliseconds(ttl_s_ * 1000 + 1000);
  std::map<int, Clock::time_point> held;  // rank -> until when its lapse is held
  auto rank_of = [&](const json &kv) { return std::atoi(key_of(kv).substr(ranks.size()).c_str()); };
  auto tell_gone = [&](int rank, const char *why) {
    held.erase(rank);
    {
      std::lock_guard<std::mutex> lock(view_mutex_);
      held_.erase(rank);
      believed_.erase(rank);
    }
    logger_.info("store: rank ", rank, "'s etcd lease is gone (", why, ")");
    on_change(rank, true);
  };
  auto tell_claimed = [&](int rank) {
    bool was_held = held.erase(rank) > 0;
    {
      std::lock_guard<std::mutex> lock(view_mutex_);
      held_.erase(rank);
      believed_.insert(rank);
    }
    if (was_held) logger_.info("store: rank ", rank, " claimed its rank again after its etcd lease lapsed: it lives");
    on_change(rank, false);
  };
  auto lapsed = [&](int rank) {
    if (rank == options_.rank) return;  // this rank's own lease: the keeper claims it again
    if (!lease_trouble_recent()) return tell_gone(rank, "its process or host ended");
    const auto until = Clock::now() + hold;
    if (!held.count(rank))
      logger_.info("store: rank ", rank, "'s etcd lease lapsed while this rank's own lease had trouble too (an etcd "
                   "stall?): it is not counted gone unless it fails to claim its rank again within ",
                   hold.count(), " ms");
    held[rank] = until;
    std::lock_guard<std::mutex> lock(view_mutex_);
    held_.insert(rank);
  };
  // The claims now against what this thread believed: a lapse or claim missed across a gap.
  auto resync = [&](const json &kvs) {
    std::set<int> now;
    for (const auto &kv : kvs) now.insert(rank_of(kv));
    std::set<int> before;
    {
      std::lock_guard<std::mutex> lock(view_mutex_);
      before = believed_;
    }
    for (int r : before)
      if (!now.count(r) && !held.count(r)) lapsed(r);
    for (int r : now)
      if (!before.count(r) || held.count(r)) tell_claimed(r);
  };
  int64_t revision = start_revision;  // watched up to here; 0: read the claims first
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(keeper_mutex_);
      if (keeper_stop_) break;
    }
    try {
      // A read first, every slice: it fails over past a member that went silent (a dead host
      // leaves a watch on it quiet, not broken), so the watch below runs on one that answers.
      json r = range_op(ranks, prefix_end(ranks), true)["request_range"];
      json answer = client->call("/v3/kv/range", r, Deadline::after_ms(4000), "watch the leases");
      if (revision == 0) {
        revision = json_i64(answer["header"], "revision");
        resync(answer.value("kvs", json::array()));
      }
      // Held lapses whose time is up: told gone unless the claim is back.
      std::set<int> claimed_now;
      for (const auto &kv : answer.value("kvs", json::array())) claimed_now.insert(rank_of(kv));
      for (auto it = held.begin(); it != held.end();) {
        const int rank = it->first;
        ++it;
        if (claimed_now.count(rank)) tell_claimed(rank);
        else if (held[rank] <= Clock::now() && !lease_trouble_recent()) tell_gone(rank, "it did not claim its rank again after its lease lapsed");
      }
      int64_t slice = kWatchSliceMs;
      for (const auto &[rank, until] : held)
        slice = std::min<int64_t>(slice, std::max<int64_t>(50, std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count()));
      json create = {{"key", base64_encode(ranks)},
                     {"range_end", base64_encode(prefix_end(ranks))},
                     {"start_revision", std::to_string(revision + 1)}};
      client->watch(create, Deadline::after_ms(slice), [&](const json &result) {
        for (const auto &ev : result.value("events", json::array())) {
          const json &kv = ev.value("kv", json::object());
          revision = std::max(revision, json_i64(kv, "mod_revision"));
          if (ev.value("type", "PUT") == "DELETE") lapsed(rank_of(kv));
          else tell_claimed(rank_of(kv));
        }
        return false;
      });
      if (client->last_watch_cancelled()) revision = 0;  // compacted: read the claims afresh
    } catch (const Error &e) {
      if (e.status() == PSTATE_ERR_ABORTED) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  std::lock_guard<std::mutex> lock(departures_mutex_);
  departures_client_ = nullptr;
}

std::optional<Error> EtcdStore::close_failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return close_failure_;
}

bool EtcdStore::close(Deadline deadline) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) return true;
  closed_ = true;
  if (lease_ == 0) return true;
  stop_keeper();
  bool ok = true;
  try {
    if (lost_) throw_error(PSTATE_ERR_PEER_LOST, lost_why_);
    try {
      client_->call("/v3/lease/revoke", json{{"ID", std::to_string(lease_.load())}}, deadline, "close");
    } catch (const Error &e) {
      // NOT_FOUND: the lease lapsed already (an etcd stall just now); the rank leaves all the same.
      if (e.status() != PSTATE_ERR_TRANSPORT || client_->last_refusal_code() != 5) throw;
      logger_.info("store: rank ", options_.rank, "'s etcd lease on ", url_, " had lapsed already when it closed");
    }
    // The last rank of the world out removes the job's keys (a compare-and-set count), and only
    // ROOT: a job on a longer prefix (PREFIX/b) keeps its own.
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
      // Every rank of the world closed (the world as pstate_shrink / pstate_grow left it: a
      // shrunk world's dead never close), or no rank holds a claim any more; the second in one
      // transaction, so a claim made meanwhile keeps the keys.
      const json remove = {{"request_delete_range",
                            {{"key", base64_encode(prefix_)}, {"range_end", base64_encode(prefix_end(prefix_))}}}};
      const std::string ranks = k("rank/");
      const int world = world_now_.load() > 0 ? world_now_.load() : options_.world_size;
      json when = n + 1 >= world ? json::array() : json::array({none_in(ranks, prefix_end(ranks))});
      client_->call("/v3/kv/txn", json{{"compare", when}, {"success", json::array({remove})}}, deadline,
                    "close: remove the job's keys");
      break;
    }
  } catch (const Error &e) {
    logger_.warn("store: closing ", url_, ": ", e.what());
    close_failure_ =
        Error(e.status(), cat(e.what(), "; the job's keys on prefix '", path_, "' stay in etcd until a ",
                              "later job on that prefix reclaims them (or `etcdctl del --prefix ", path_, "/@/`)"));
    ok = false;
  }
  logger_.info("store: closed ", url_, " after ", client_->requests() + keeper_requests_.load(),
               " requests to etcd (lease renewals included)");
  return ok;
}

}  // namespace pstate
