// job_store_client.hpp — what `pstate run` asks of its job's store, and the /dev/shm names it
// removes once its ranks have ended: dumps are asked for without a signal, and a job leaves no
// segment behind.
//
// Dumps: `pstate run` asks every rank for its flight-recorder dump through the store (the key
// protocol of group/dump_watcher.hpp: add "pstate/dump/count", set "pstate/dump/<n>"), never with
// a signal the program did not ask for; members() says which ranks are connected to the store,
// i.e. have a pstate context that can answer, so the launcher waits only for their dumps.
//
// Shared memory: a rank killed while a peer had yet to attach to a segment it made (a signal runs
// none of its code) leaves the segment's name in /dev/shm; shm_job_id() reads the id those names
// carry (transport/shm/shm_names.hpp) from the rank directory rank 0 publishes on the store, and
// remove_job_shm_names() removes the names of that job only.
//
// The client is an observer (rank -1: it claims no rank) that connects on first use, within the
// call's timeout, and again after a failure; every call throws pstate::Error on a store error.
#pragma once

#include "bootstrap/store.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pstate::cli {

class JobStoreClient {
 public:
  // url: "tcp://HOST:PORT" of the job's store; token and job id: the job's (PSTATE_JOB_TOKEN,
  // PSTATE_JOB_ID), which the store checks.
  JobStoreClient(std::string url, std::string job_token, std::string job_id);

  // Asks every rank of the job for a dump; `why` becomes the dumps' reason ("a request through
  // the store (why)"). Returns the request's number.
  int64_t request_dumps(const std::string &why, int64_t timeout_ms);
  // The ranks connected to the store now, ascending.
  std::vector<int> members(int64_t timeout_ms);
  // The job id of the ranks' shared-memory names, once rank 0 has published the rank directory
  // (pstate_init got that far); "" before.
  std::string shm_job_id(int64_t timeout_ms);
  // What each rank put at "pstate/metrics/<rank>" (its metrics endpoint: "ADDRESS HOSTNAME",
  // group/metrics_endpoint.hpp), "" for a rank that has not (yet).
  std::vector<std::string> metrics_endpoints(const std::vector<int> &ranks, int64_t timeout_ms);
  // Forgets the connection (a later call connects again).
  void disconnect() { store_.reset(); }

 private:
  Store &store(int64_t timeout_ms);

  std::string url_, token_, job_id_;
  std::unique_ptr<Store> store_;
};

// Removes every /dev/shm entry of the job whose shared-memory id is `shm_job` (the names
// /dev/shm/pstate-<shm_job>-...) and returns the names removed. An id that could match another
// job's names (empty, or with a character other than a letter or a digit) removes nothing.
std::vector<std::string> remove_job_shm_names(const std::string &shm_job);

}  // namespace pstate::cli
