// roster.hpp — what the stores know of a job and its ranks, written once for the three of them
// (the TCP store's server, the file store, the etcd store): the job's meta record with the job
// token's fingerprint, who this process is, the record of a job that cannot start, and the
// absent-ranks classifier that turns a store's view of the world into the words of a wait that
// times out ("rank 1 of 0..3 never connected; rank 3 joined and left; last seen: ...").
//
// Each store feeds the classifier from what it keeps: the TCP server from its connections and its
// notes (who was refused, who left, and when), the file store from its rank locks and joined/
// files, the etcd store from ROOT/rank/ (the live leases) and ROOT/joined/. The words are the
// same for the three; what a store can say beyond them (the refusals the server saw, the etcd
// lease) it passes in.
//
// The records are formats on disk and in etcd that every rank of a job reads (and a process of
// a later job, reclaiming a leftover): each store's spelling (MetaDialect) is kept byte for byte.
#pragma once

#include "bootstrap/store.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pstate {

// ---- small helpers of the stores ---------------------------------------------------------------

int64_t ms_since(std::chrono::steady_clock::time_point start);
inline std::string text_of(const Bytes &b) { return std::string(b.begin(), b.end()); }
inline Bytes bytes_of(std::string_view s) { return Bytes(s.begin(), s.end()); }

// ---- who this process is -----------------------------------------------------------------------

std::string this_host();     // gethostname(), "?" when it fails
std::string this_process();  // "pid 123 on host h1": a rank's claim, and messages

// ---- the job's meta record ---------------------------------------------------------------------

// Which store keeps the record: the file store (PATH/meta) or the etcd store (ROOT/meta). They
// spell it differently and derive the token's fingerprint with different labels.
enum class MetaDialect { kFileStore, kEtcdStore };

// What the first rank of a job writes for every later one to check itself against.
struct JobMeta {
  int version = 0;         // of the record's first line (the file store reads 1 and 2, writes 2)
  int world_size = 0;
  std::string token;       // token_fingerprint(), "none" without a token
  std::string job_id;      // PSTATE_JOB_ID ("" when none)
  int creator_rank = -1;   // the rank that created the record
  std::string creator;     // file store: the creator's process record (empty in version 1)
  int64_t ttl_s = 0;       // etcd store: the creator's lease TTL (0: not said)
};

// One "name value" line per field after the dialect's first line ("pstate-file-store 2",
// "pstate-etcd-store 1").
std::string encode_job_meta(const JobMeta &meta, MetaDialect dialect);
// False when text is not a record: the file store's needs its first line, the world size, the
// token and the creating rank; the etcd store's takes what it finds (a field it cannot read keeps
// its default).
bool decode_job_meta(std::string_view text, MetaDialect dialect, JobMeta *meta);

// HMAC-SHA256(token, the dialect's label) in hex: the record keeps it, never the token; "none"
// without a token.
std::string token_fingerprint(const std::string &token, MetaDialect dialect);

// ---- a job that cannot start -------------------------------------------------------------------

// "rank 2" or "an observer" (rank -1), for the reasons below.
std::string rank_or_observer(int rank);
// The reasons a job fails with: "the store refused rank 2 (ORIGIN): WHY" (a process of the job
// refused before the world was complete), "rank 1 gave up: WHY" (Store::abandon).
std::string refused_reason(int rank, const std::string &origin, const std::string &why);
std::string gave_up_reason(int rank, const std::string &why);
// The record the file and etcd stores keep in `failed`: "status N\nthe job cannot start: REASON".
std::string job_failure_record(pstate_status_t status, const std::string &reason);
// Throws what a record says: its status (MISMATCH when it names none that is valid) and its text,
// "... (told by the store at WHERE)".
[[noreturn]] void throw_job_failure(const std::string &record, const std::string &where);

// ---- the absent ranks ----------------------------------------------------------------------------

// Why a rank of the world is not in the store now.
enum class Absence {
  kNeverConnected,  // no process claimed it
  kRefused,         // a process claimed it and was refused ("never joined")
  kLeft,            // it joined, and is gone
};

// What a store says of its absent ranks beyond the common words.
struct AbsenceWords {
  std::string_view left = " joined and left";  // the etcd store adds why a rank may be gone
  bool last_seen = true;                       // "; last seen: ..." follows (the etcd store: no)
};

// The absent ranks of one look at the store, fed in rank order by the store (add), described in
// the words every store uses.
class AbsentRanks {
 public:
  // listed: how many ranks of each kind the lists keep (the counts stay exact), which bounds the
  // work and the words for a world of a million ranks.
  explicit AbsentRanks(int world_size, AbsenceWords words = {}, size_t listed = SIZE_MAX);

  // Rank `rank` is absent for `why`; `seen` is what the store last saw of it ("left (pid 7 on
  // host a)", "refused 1.2 s ago (...)"), empty when nothing.
  void add(int rank, Absence why, std::string seen = {});
  size_t count() const { return count_; }
  // Whether the list of that kind is full (a store may then skip working out what it saw).
  bool full(Absence why) const { return kind(why).ranks.size() >= listed_; }
  // The absent ranks, short ("1, 3-5 and 2 more"); "" when none.
  std::string waiting_for() const;
  // "rank 1 of 0..3 never connected; rank 2 never joined; rank 3 joined and left; last seen:
  // rank 3 left (...)" (up to 4 last-seen notes, refusals first); "" when no rank is absent.
  std::string describe() const;

 private:
  struct Kind {
    std::vector<int> ranks;  // the first `listed`
    std::vector<std::string> seen;
    size_t count = 0;
  };
  const Kind &kind(Absence why) const;

  int world_size_;
  AbsenceWords words_;
  size_t listed_;
  Kind never_, refused_, left_;
  std::vector<int> all_;  // the first `listed` absent ranks, of any kind
  size_t count_ = 0;
};

// ---- a wait that timed out ---------------------------------------------------------------------

// "timed out after N ms", or, for waited_ms < 1 (waited_for_timeout: -1 when the deadline had
// passed before the call began), that its deadline had passed (or all but) when it was called: a
// deadline shared by several steps (the rendezvous') used up by the earlier ones (never
// "timed out after 0 ms"). The caller says the deadline.
std::string timed_out_after(int64_t waited_ms);
int64_t waited_for_timeout(std::chrono::steady_clock::time_point start, bool spent_on_entry);
// The TIMEOUT of a get()/wait() that the file and etcd stores (and the TCP store's wait) throw:
// what, where, how long, the absent ranks when the store knows some, and the key or keys missing.
[[noreturn]] void throw_get_timeout(const std::string &what, const std::string &url, int64_t waited_ms,
                                    const std::string &absent, const std::string &key);
[[noreturn]] void throw_wait_timeout(const std::string &what, const std::string &url, int64_t waited_ms,
                                     const std::string &absent, const std::vector<std::string> &missing,
                                     size_t missing_count, size_t keys);

}  // namespace pstate
