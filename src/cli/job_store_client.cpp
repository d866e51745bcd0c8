// job_store_client.cpp — `pstate run`'s observer client of its job's store, and the removal of a
// job's leftover /dev/shm names (see the header).
#include "cli/job_store_client.hpp"

#include "common/error.hpp"
#include "common/log.hpp"
#include "group/dump_watcher.hpp"
#include "group/rank_records.hpp"
#include "transport/shm/shm_names.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace pstate::cli {

JobStoreClient::JobStoreClient(std::string url, std::string job_token, std::string job_id)
    : url_(std::move(url)), token_(std::move(job_token)), job_id_(std::move(job_id)) {}

Store &JobStoreClient::store(int64_t timeout_ms) {
  if (!store_) {
    StoreOptions o;
    o.init_method = url_;
    o.rank = -1;  // an observer: claims no rank
    o.world_size = 0;
    o.job_token = token_;
    o.job_id = job_id_;
    o.timeout_ms = timeout_ms;
    o.serve = false;
    store_ = open_store(o, Logger(LogLevel::kNone));
  }
  return *store_;
}

int64_t JobStoreClient::request_dumps(const std::string &why, int64_t timeout_ms) {
  try {
    Store &s = store(timeout_ms);
    const int64_t n = s.add(DumpWatcher::kCountKey, 1, Deadline::after_ms(timeout_ms));
    s.set(DumpWatcher::request_key(n), Bytes(why.begin(), why.end()), Deadline::after_ms(timeout_ms));
    return n;
  } catch (const Error &) {
    disconnect();
    throw;
  }
}

std::vector<int> JobStoreClient::members(int64_t timeout_ms) {
  try {
    auto m = store(timeout_ms).members(Deadline::after_ms(timeout_ms));
    if (!m) throw_error(PSTATE_ERR_UNSUPPORTED, "the store at ", url_, " cannot tell which ranks are connected");
    return *m;
  } catch (const Error &) {
    disconnect();
    throw;
  }
}

std::string JobStoreClient::shm_job_id(int64_t timeout_ms) {
  try {
    Store &s = store(timeout_ms);
    if (!s.check("pstate/peers", Deadline::after_ms(timeout_ms))) return "";
    return decode_rank_directory(s.get("pstate/peers", Deadline::after_ms(timeout_ms))).job_id;
  } catch (const Error &) {
    disconnect();
    throw;
  }
}

std::vector<std::string> JobStoreClient::metrics_endpoints(const std::vector<int> &ranks, int64_t timeout_ms) {
  std::vector<std::string> out(ranks.size());
  try {
    Store &s = store(timeout_ms);
    for (size_t i = 0; i < ranks.size(); ++i) {
      const std::string key = "pstate/metrics/" + std::to_string(ranks[i]);
      if (!s.check(key, Deadline::after_ms(timeout_ms))) continue;
      const Bytes v = s.get(key, Deadline::after_ms(timeout_ms));
      out[i].assign(v.begin(), v.end());
    }
  } catch (const Error &) {
    disconnect();
    throw;
  }
  return out;
}

std::vector<std::string> remove_job_shm_names(const std::string &shm_job) {
  std::vector<std::string> removed;
  const bool plain = !shm_job.empty() && std::all_of(shm_job.begin(), shm_job.end(), [](unsigned char c) {
    return std::isalnum(c) != 0;
  });
  if (!plain) return removed;  // "-" or "" would reach into other jobs' names
  const std::string prefix = shm::job_name_prefix(shm_job);
  DIR *d = ::opendir("/dev/shm");
  if (d == nullptr) return removed;
  std::vector<std::string> names;
  while (const dirent *e = ::readdir(d))
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) names.emplace_back(e->d_name);
  for (const auto &name : names)
    if (::unlinkat(::dirfd(d), name.c_str(), 0) == 0) removed.push_back(name);
  ::closedir(d);
  std::sort(removed.begin(), removed.end());
  return removed;
}

}  // namespace pstate::cli
