// shm_names.hpp — the names of pstate's shared-memory segments, in one place, so that whatever a
// job leaves in /dev/shm can be found and removed by its name.
//
// Every segment of a job is /dev/shm/pstate-<job>-...: <job> is the job's random id that rank 0
// makes at each pstate_init and publishes in the rank directory (group/rank_records.hpp
// RankDirectory::job_id; it carries no '-'). A group's segments are
// /pstate-<job>-<group id>-<first rank>-coll (shm_group), -mq (message_queue) and -p2p-<a>-<b>
// (shm_p2p, one per pair of group ranks). A name is unlinked once every rank that uses it has
// attached, so it outlives the job only when the ranks that made it were killed while a peer had
// yet to attach; `pstate run` removes those by this prefix once every rank of its job has ended
// (src/cli/job_store_client.cpp).
#pragma once

#include <string>

namespace pstate::shm {

// "pstate-<job>-": the start of every /dev/shm entry of the job (without shm_open's '/').
inline std::string job_name_prefix(const std::string &job_id) { return "pstate-" + job_id + "-"; }

}  // namespace pstate::shm
