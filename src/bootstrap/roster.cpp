// roster.cpp — the job's records and the absent-ranks classifier the stores share (see roster.hpp).
#include "bootstrap/roster.hpp"

#include "bootstrap/crypto.hpp"
#include "bootstrap/wire.hpp"
#include "common/error.hpp"

#include <unistd.h>

#include <charconv>
#include <cstdlib>

namespace pstate {
namespace {

// How each store spells its meta record (fixed: every rank of a job reads it).
struct Spelling {
  std::string_view first_line;  // what it writes first
  std::string_view rank_field;  // the creating rank's field
  std::string_view label;       // the token fingerprint's HMAC message
};

const Spelling &spelling(MetaDialect dialect) {
  static const Spelling kFile{"pstate-file-store 2", "created_by_rank", "pstate-file-store-v1"};
  static const Spelling kEtcd{"pstate-etcd-store 1", "creator", "pstate-etcd-store-v1"};
  return dialect == MetaDialect::kFileStore ? kFile : kEtcd;
}

// The leading integer of text (as stoi reads it, without the leading blanks); false when none.
template <typename Int>
bool leading_int(std::string_view text, Int *out, int base = 10) {
  Int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc() || end == text.data()) return false;
  *out = value;
  return true;
}

// The job id's hex ("-" is none: the file store writes it so; the etcd store writes nothing).
bool unhex(std::string_view hex, std::string *out) {
  out->clear();
  if (hex == "-") return true;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    int byte = 0;
    if (!leading_int(hex.substr(i, 2), &byte, 16)) return false;
    *out += static_cast<char>(byte);
  }
  return true;
}

}  // namespace

int64_t ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
}

std::string this_host() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "?";
  return host;
}

std::string this_process() { return cat("pid ", ::getpid(), " on host ", this_host()); }

// ---- the meta record ---------------------------------------------------------------------------

std::string encode_job_meta(const JobMeta &meta, MetaDialect dialect) {
  const Spelling &s = spelling(dialect);
  const bool file = dialect == MetaDialect::kFileStore;
  const std::string job_id = file && meta.job_id.empty() ? "-" : crypto::to_hex(crypto::as_bytes(meta.job_id));
  std::string text = cat(s.first_line, "\nworld_size ", meta.world_size, "\ntoken ", meta.token, "\njob_id ", job_id,
                         "\n", s.rank_field, " ", meta.creator_rank, "\n");
  return text + (file ? cat("created_by ", meta.creator, "\n") : cat("ttl ", meta.ttl_s, "\n"));
}

bool decode_job_meta(std::string_view text, MetaDialect dialect, JobMeta *meta) {
  const Spelling &s = spelling(dialect);
  const bool file = dialect == MetaDialect::kFileStore;
  *meta = JobMeta{};
  size_t pos = 0;
  auto next_line = [&](std::string_view *line) {
    if (pos >= text.size()) return false;
    size_t nl = text.find('\n', pos);
    *line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    return true;
  };
  std::string_view line;
  if (file) {  // the file store's first line names its version (1 or 2)
    if (!next_line(&line) || (line != "pstate-file-store 1" && line != "pstate-file-store 2")) return false;
    meta->version = line.back() - '0';
  } else {
    meta->version = 1;
  }
  int required = 0;  // world size, token, creating rank
  bool readable = true;
  while (next_line(&line)) {
    size_t space = line.find(' ');
    if (space == std::string_view::npos) continue;
    std::string_view name = line.substr(0, space), value = line.substr(space + 1);
    if (name == "world_size")
      readable &= leading_int(value, &meta->world_size), ++required;
    else if (name == "token")
      meta->token = value, ++required;
    else if (name == "job_id")
      readable &= unhex(value, &meta->job_id);
    else if (name == s.rank_field)
      readable &= leading_int(value, &meta->creator_rank), ++required;
    else if (file && name == "created_by")
      meta->creator = value;
    else if (!file && name == "ttl")
      readable &= leading_int(value, &meta->ttl_s);
  }
  return !file || (readable && required == 3);
}

std::string token_fingerprint(const std::string &token, MetaDialect dialect) {
  if (token.empty()) return "none";
  return crypto::to_hex(crypto::hmac_sha256(crypto::as_bytes(token), crypto::as_bytes(spelling(dialect).label)));
}

// ---- a job that cannot start -------------------------------------------------------------------

std::string rank_or_observer(int rank) { return rank >= 0 ? cat("rank ", rank) : std::string("an observer"); }

std::string refused_reason(int rank, const std::string &origin, const std::string &why) {
  return cat("the store refused ", rank_or_observer(rank), " (", origin, "): ", why);
}

std::string gave_up_reason(int rank, const std::string &why) { return cat(rank_or_observer(rank), " gave up: ", why); }

std::string job_failure_record(pstate_status_t status, const std::string &reason) {
  return cat("status ", static_cast<int>(status), "\n", wire::kJobFailedPrefix, reason);
}

void throw_job_failure(const std::string &record, const std::string &where) {
  std::string text = record;
  int status = PSTATE_ERR_MISMATCH;
  size_t nl = text.find('\n');
  if (text.rfind("status ", 0) == 0 && nl != std::string::npos) {
    status = std::atoi(text.c_str() + 7);
    text = text.substr(nl + 1);
  }
  if (status <= PSTATE_OK || status > PSTATE_ERR_INTERNAL) status = PSTATE_ERR_MISMATCH;
  throw_error(static_cast<pstate_status_t>(status), text, " (told by the store at ", where, ")");
}

// ---- the absent ranks ----------------------------------------------------------------------------

AbsentRanks::AbsentRanks(int world_size, AbsenceWords words, size_t listed)
    : world_size_(world_size), words_(words), listed_(listed) {}

const AbsentRanks::Kind &AbsentRanks::kind(Absence why) const {
  switch (why) {
    case Absence::kNeverConnected:
      return never_;
    case Absence::kRefused:
      return refused_;
    case Absence::kLeft:
      break;
  }
  return left_;
}

void AbsentRanks::add(int rank, Absence why, std::string seen) {
  Kind &k = const_cast<Kind &>(kind(why));
  if (k.ranks.size() < listed_) {
    k.ranks.push_back(rank);
    k.seen.push_back(std::move(seen));
  }
  if (all_.size() < listed_) all_.push_back(rank);
  ++k.count;
  ++count_;
}

std::string AbsentRanks::waiting_for() const { return count_ == 0 ? std::string() : rank_list(all_, count_); }

std::string AbsentRanks::describe() const {
  if (count_ == 0) return "";
  const std::string of = cat(" of 0..", world_size_ - 1);
  std::string text;
  auto say = [&](const Kind &k, std::string_view what) {
    if (k.count == 0) return;
    text += cat(text.empty() ? "" : "; ", ranks_phrase(k.ranks, k.count), text.empty() ? of : "", what);
  };
  say(never_, " never connected");
  say(refused_, " never joined");
  say(left_, words_.left);
  if (!words_.last_seen) return text;
  std::string seen;
  size_t shown = 0;
  constexpr size_t kShown = 4;
  for (const Kind *k : {&refused_, &left_})
    for (size_t i = 0; i < k->ranks.size() && shown < kShown; ++i)
      if (!k->seen[i].empty()) seen += cat(shown++ ? "; " : "", "rank ", k->ranks[i], " ", k->seen[i]);
  return text + "; last seen: " + (seen.empty() ? std::string("none") : seen);
}

// ---- a wait that timed out ---------------------------------------------------------------------

int64_t waited_for_timeout(std::chrono::steady_clock::time_point start, bool spent_on_entry) {
  if (spent_on_entry) return -1;
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
}

std::string timed_out_after(int64_t waited_ms) {
  if (waited_ms >= 1) return cat("timed out after ", waited_ms, " ms");
  return "timed out at once: its deadline had passed (or all but) when it was called, used up by the caller's "
         "earlier steps";
}

void throw_get_timeout(const std::string &what, const std::string &url, int64_t waited_ms, const std::string &absent,
                       const std::string &key) {
  throw_error(PSTATE_ERR_TIMEOUT, what, " on the store at ", url, " ", timed_out_after(waited_ms),
              absent.empty() ? std::string() : ": " + absent, " (waiting for key ", quote_key(key),
              ": did the rank that sets it fail or not start?)");
}

void throw_wait_timeout(const std::string &what, const std::string &url, int64_t waited_ms, const std::string &absent,
                        const std::vector<std::string> &missing, size_t missing_count, size_t keys) {
  throw_error(PSTATE_ERR_TIMEOUT, what, " on the store at ", url, " ", timed_out_after(waited_ms), ": ",
              absent.empty() ? std::string() : absent + " (", missing_count, " of ", keys,
              " keys never set: ", quote_keys(missing, missing_count), absent.empty() ? "" : ")");
}

}  // namespace pstate
