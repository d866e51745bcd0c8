// doctor_analysis.cpp — from the dumps of one job to "which rank, which group, which operation".
//
// The algorithm:
//
// 1. Groups are matched across ranks by name and members (a dump's gid is its own numbering).
//    Each rank's progress in a group is the `collectives` of its group line: the number of
//    collectives it has called there, so a rank whose progress is <= s never called collective
//    #s. A member rank whose dump has no line for the group has called none (progress 0).
// 2. Collective entries are matched by (group, seq); point-to-point ones by (group, sender,
//    receiver, seq), where seq counts the sends to (receives from) that one peer.
// 3. mismatch: at one (group, seq) the ranks recorded different op / count / dtype / redop /
//    root ("-" matches anything; object sizes are not compared: they differ by design). The odd
//    ranks are those outside the largest agreeing set; when no set is largest, all are named.
// 4. stalls: an entry that is waiting — posted/started, or failed with TIMEOUT, PEER_LOST or
//    ABORTED (it waited until then) — makes a stall at its (group, seq). Its blockers are the
//    member ranks that never called it (behind: progress <= seq and no entry there; for p2p: the
//    peer has no matching entry) and the member ranks with no dump (missing). A stall without
//    blockers is stuck (every rank called it; the data path did not finish).
// 5. The culprit: each waiter waits for the stall's blockers. Blockers that are not waiting
//    themselves (idle, in a call nobody blocks, or missing) are the roots ("sinks"). The verdict
//    stall is chosen in tiers: blockers all sinks, then some sinks, then (no sink: a cycle, the
//    ranks call collectives in different orders) any stall with blockers; within a tier, the one
//    with the most waiting ranks, ties by the earliest posted time.
//    The verdict order: mismatches (a mismatch makes the others wait), stalls with blockers,
//    missing ranks no one waited for, other failures (TRANSPORT, ...: the likely reason the
//    others are stuck), stuck stalls (no culprit rank). Nothing of these: exit status 0.
// 6. What a behind rank does instead: inside another pstate call (in_call, and its waiting entry)
//    or idle outside pstate, with the time since its last call returned, measured against the
//    earliest dump of the ranks that waited for it.
// 7. Epochs (a job that called pstate_shrink / pstate_grow; the dumps' `epochs` line): groups are
//    matched by (epoch, name, members), and only the groups of the latest epoch decide the
//    verdict; what happened in earlier ones (the death the survivors shrank around) is listed as
//    "recovered". A rank of the latest world whose dump is older than that epoch (it did not dump
//    again after the rebuild) counts as missing there: its dump tells nothing of what it does now;
//    and a replacement's dump (its first epoch is later) tells nothing of the groups before it.
#include "cli/doctor_analysis.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <set>
#include <tuple>

namespace pstate::cli {

std::string json_string(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string rank_list(const std::vector<int> &ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

JobDumps select_job(std::vector<TraceDump> all) {
  JobDumps job;
  if (all.empty()) return job;
  auto newest = std::max_element(all.begin(), all.end(),
                                 [](const TraceDump &a, const TraceDump &b) { return a.dumped_ns < b.dumped_ns; });
  job.job = newest->job;
  job.world = newest->world;
  std::set<std::string> others;
  for (TraceDump &d : all) {
    if (d.job != job.job) {
      ++job.ignored_dumps;
      others.insert(d.job);
      continue;
    }
    if (d.world != job.world)
      throw TraceFormatError(d.file, 0,
                             "world " + std::to_string(d.world) + ", but the other dumps of job " + job.job +
                                 " say world " + std::to_string(job.world));
    for (const TraceDump &prev : job.dumps)
      if (prev.rank == d.rank)
        throw TraceFormatError(d.file, 0,
                               "a second dump of rank " + std::to_string(d.rank) + " of job " + job.job +
                                   " (the other is " + prev.file + ")");
    job.dumps.push_back(std::move(d));
  }
  job.ignored_jobs.assign(others.begin(), others.end());
  std::sort(job.dumps.begin(), job.dumps.end(), [](const TraceDump &a, const TraceDump &b) { return a.rank < b.rank; });
  return job;
}

namespace {

// The world group's name: "world:0" as pstate writes it, "world" in older dumps.
bool is_world(const std::string &name) {
  return name == "world" || name.rfind("world:", 0) == 0;
}

bool is_waiting(const TraceEntry &e) {
  return e.pending() || (e.failed() && (e.status == "TIMEOUT" || e.status == "PEER_LOST" || e.status == "ABORTED"));
}

bool is_object_op(const std::string &op) {
  return op.find("object") != std::string::npos || op.find("tensor_dict") != std::string::npos;
}

std::string seconds(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ns) / 1e9);
  return buf;
}

std::string ranks_phrase(const std::vector<int> &ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

// "count 8 float32 sum root 0", without the parts that are "-".
std::string op_details(const TraceEntry &e) {
  std::string out;
  auto add = [&out](const std::string &part) { out += (out.empty() ? "" : " ") + part; };
  if (e.count != kNone) add("count " + std::to_string(e.count));
  if (e.dtype != "-") add(e.dtype);
  if (e.redop != "-") add(e.redop);
  if (e.cls == "coll" && e.root >= 0) add("root " + std::to_string(e.root));
  return out;
}

std::string paren(const std::string &s) {
  return s.empty() ? "" : " (" + s + ")";
}

// ---- the job, indexed once --------------------------------------------------------------------

struct Stall {
  int group = 0;
  int64_t seq = 0;
  bool p2p = false;
  int sender = -1, receiver = -1;             // global ranks, p2p only
  std::map<int, const TraceEntry *> waiters;  // rank -> its waiting entry
  std::vector<int> behind, missing;
  int64_t first_posted = std::numeric_limits<int64_t>::max();

  std::vector<int> blockers() const {
    std::vector<int> out = behind;
    out.insert(out.end(), missing.begin(), missing.end());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::vector<int> waiter_ranks() const {
    std::vector<int> out;
    for (const auto &w : waiters) out.push_back(w.first);
    return out;
  }
};

class Analysis {
 public:
  explicit Analysis(const JobDumps &job) : job_(job) {
    for (const TraceDump &d : job.dumps) by_rank_[d.rank] = &d;
    for (int r = 0; r < job.world; ++r)
      if (!by_rank_.count(r)) diag_.missing.push_back(r);
    index_groups();
    index_collectives();
  }

  Diagnosis run() {
    find_mismatches();
    find_coll_stalls();
    find_p2p_stalls();
    decide();
    write_evidence();
    diag_.groups = groups_;
    return std::move(diag_);
  }

 private:
  const TraceDump *dump(int rank) const {
    auto it = by_rank_.find(rank);
    return it == by_rank_.end() ? nullptr : it->second;
  }
  const GroupProgress &group(int g) const { return groups_[g]; }
  int group_of(const TraceDump &d, int gid) const { return dump_group_.at({d.rank, gid}); }
  int64_t progress(int g, int rank) const {
    auto it = groups_[g].collectives.find(rank);
    return it == groups_[g].collectives.end() ? 0 : it->second;
  }

  // Groups by (epoch, name, members): by epoch, world first in each, then by name.
  void index_groups() {
    using Key = std::tuple<int64_t, std::string, std::vector<int>>;
    std::set<Key> keys;
    bool epochs = false;
    for (const TraceDump &d : job_.dumps) {
      diag_.epoch = std::max(diag_.epoch, d.epoch);
      epochs = epochs || !d.epochs.empty();
      for (const TraceGroup &g : d.groups) keys.insert({g.epoch, g.name, g.members});
    }
    std::vector<Key> ordered(keys.begin(), keys.end());
    std::stable_sort(ordered.begin(), ordered.end(), [](const Key &a, const Key &b) {
      return std::make_tuple(std::get<0>(a), !is_world(std::get<1>(a))) < std::make_tuple(std::get<0>(b), !is_world(std::get<1>(b)));
    });
    for (auto &[epoch, name, members] : ordered) {
      GroupProgress gp{name, members, epoch, name, {}};
      if (epochs) gp.label += " (epoch " + std::to_string(epoch) + ")";
      groups_.push_back(gp);
    }
    for (const TraceDump &d : job_.dumps)
      for (const TraceGroup &g : d.groups) {
        int index = 0;
        while (groups_[index].epoch != g.epoch || groups_[index].name != g.name || groups_[index].members != g.members)
          ++index;
        dump_group_[{d.rank, g.gid}] = index;
        groups_[index].collectives[d.rank] = g.collectives;
      }
    for (GroupProgress &g : groups_)  // a member with a dump (of the group's epoch) but no line for it called none
      for (int m : g.members)
        if (dumped_in(m, g) && !g.collectives.count(m)) g.collectives[m] = 0;
  }

  // rank's dump was written before the world of g's epoch was built: it knows nothing of g.
  bool stale(int rank, const GroupProgress &g) const {
    const TraceDump *d = dump(rank);
    return d != nullptr && d->epoch < g.epoch;
  }
  // rank's dump is of a replacement that joined after g's epoch: g's member of that rank was
  // another process, which left no dump.
  bool newer(int rank, const GroupProgress &g) const {
    const TraceDump *d = dump(rank);
    return d != nullptr && d->first_epoch > g.epoch;
  }
  // rank's dump speaks of g: it exists and is of g's epoch (neither stale nor newer).
  bool dumped_in(int rank, const GroupProgress &g) const { return dump(rank) && !stale(rank, g) && !newer(rank, g); }
  bool absent(int rank, int g) const { return !dumped_in(rank, group(g)); }
  bool recovered(int g) const { return group(g).epoch < diag_.epoch; }

  void index_collectives() {
    for (const TraceDump &d : job_.dumps)
      for (const TraceEntry &e : d.entries)
        if (e.cls == "coll") coll_[{group_of(d, e.gid), e.seq}][d.rank] = &e;
  }

  std::string where(int g, int64_t seq, const TraceEntry &e) const {
    return e.op + " #" + std::to_string(seq) + " of " + group(g).label;
  }

  // ---- mismatch ---------------------------------------------------------------------------------

  static bool agree(const TraceEntry &a, const TraceEntry &b) {
    auto same = [](const std::string &x, const std::string &y) { return x == "-" || y == "-" || x == y; };
    auto same_n = [](int64_t x, int64_t y) { return x == kNone || y == kNone || x == y; };
    if (a.op != b.op || !same(a.dtype, b.dtype) || !same(a.redop, b.redop) || !same_n(a.root, b.root)) return false;
    return is_object_op(a.op) || same_n(a.count, b.count);
  }

  void find_mismatches() {
    for (const auto &[key, entries] : coll_) {
      if (entries.size() < 2) continue;
      std::vector<std::pair<const TraceEntry *, std::vector<int>>> sets;  // agreeing ranks
      for (const auto &[rank, entry] : entries) {
        const TraceEntry *e = entry;  // a lambda may not capture a structured binding before C++20
        auto it = std::find_if(sets.begin(), sets.end(), [e](const auto &s) { return agree(*s.first, *e); });
        if (it == sets.end())
          sets.push_back({e, {rank}});
        else
          it->second.push_back(rank);
      }
      if (sets.size() < 2) continue;
      std::stable_sort(sets.begin(), sets.end(),
                       [](const auto &a, const auto &b) { return a.second.size() > b.second.size(); });
      bool majority = sets[0].second.size() > sets[1].second.size();
      const auto &[g, seq] = key;
      Finding f;
      f.kind = "mismatch";
      f.group = group(g).name;
      f.epoch = group(g).epoch;
      f.seq = seq;
      std::string calls;
      for (size_t i = majority ? 1 : 0; i < sets.size(); ++i) {
        f.ranks.insert(f.ranks.end(), sets[i].second.begin(), sets[i].second.end());
        calls += (calls.empty() ? "" : (majority ? " and " : ", ")) + ranks_phrase(sets[i].second) + " called " +
                 sets[i].first->op + paren(op_details(*sets[i].first));
      }
      std::sort(f.ranks.begin(), f.ranks.end());
      f.op = sets[majority ? 1 : 0].first->op;
      std::string coll = "collective #" + std::to_string(seq) + " of " + group(g).label;
      if (majority) {
        f.text = calls + " as " + coll + ", where " + ranks_phrase(sets[0].second) + " called " + sets[0].first->op +
                 paren(op_details(*sets[0].first));
      } else {
        f.text = ranks_phrase(f.ranks) + " disagree on " + coll + ": " + calls;
      }
      int64_t first = std::numeric_limits<int64_t>::max();
      for (const auto &entry : entries) first = std::min(first, entry.second->posted_ns);
      mismatches_.push_back({first, f});
      mismatched_.insert(key);
    }
    std::stable_sort(mismatches_.begin(), mismatches_.end(),
                     [](const auto &a, const auto &b) { return a.first < b.first; });
  }

  // ---- stalls -----------------------------------------------------------------------------------

  void find_coll_stalls() {
    for (const auto &[key, entries] : coll_) {
      if (mismatched_.count(key)) continue;
      Stall s;
      std::tie(s.group, s.seq) = key;
      for (const auto &[rank, e] : entries)
        if (is_waiting(*e)) {
          s.waiters[rank] = e;
          s.first_posted = std::min(s.first_posted, e->posted_ns);
        }
      if (s.waiters.empty()) continue;
      for (int m : group(s.group).members) {
        if (absent(m, s.group))
          s.missing.push_back(m);
        else if (!entries.count(m) && progress(s.group, m) <= s.seq)
          s.behind.push_back(m);
      }
      stalls_.push_back(s);
    }
  }

  // The entry on `rank` that matches a p2p transfer (group g, sender, receiver, stream, seq), or null.
  const TraceEntry *p2p_match(int rank, int g, int sender, int receiver, int stream, int64_t seq) const {
    const TraceDump *d = dump(rank);
    const std::vector<int> &members = group(g).members;
    int other = rank == sender ? receiver : sender;
    int other_in_group = static_cast<int>(std::find(members.begin(), members.end(), other) - members.begin());
    for (const TraceEntry &e : d->entries)
      if (e.cls == "p2p" && group_of(*d, e.gid) == g && e.seq == seq && e.peer == other_in_group &&
          e.is_send() == (rank == sender) && e.stream() == stream)
        return &e;
    return nullptr;
  }

  void find_p2p_stalls() {
    // (group, sender, receiver, stream, seq) -> stall
    std::map<std::tuple<int, int, int, int, int64_t>, size_t> seen;
    for (const TraceDump &d : job_.dumps)
      for (const TraceEntry &e : d.entries) {
        if (e.cls != "p2p" || !is_waiting(e)) continue;
        int g = group_of(d, e.gid);
        int peer = group(g).members[e.peer];
        int sender = e.is_send() ? d.rank : peer, receiver = e.is_send() ? peer : d.rank;
        auto key = std::make_tuple(g, sender, receiver, e.stream(), e.seq);
        auto it = seen.find(key);
        if (it == seen.end()) {
          Stall s;
          s.group = g;
          s.seq = e.seq;
          s.p2p = true;
          s.sender = sender;
          s.receiver = receiver;
          if (absent(peer, g))
            s.missing.push_back(peer);
          else if (!p2p_match(peer, g, sender, receiver, e.stream(), e.seq))
            s.behind.push_back(peer);
          it = seen.emplace(key, stalls_.size()).first;
          stalls_.push_back(s);
        }
        Stall &s = stalls_[it->second];
        s.waiters[d.rank] = &e;
        s.first_posted = std::min(s.first_posted, e.posted_ns);
      }
  }

  // ---- words for a stall ------------------------------------------------------------------------

  // "all_reduce #9 (count 4 float32 sum)" / "send #4 to rank 1 (count 1024 bfloat16)", as the
  // waiters see it.
  std::string stall_op(const Stall &s, bool details) const {
    const TraceEntry &e = *s.waiters.begin()->second;
    std::string out = e.op + " #" + std::to_string(s.seq);
    if (s.p2p) out += e.is_send() ? " to rank " + std::to_string(s.receiver) : " from rank " + std::to_string(s.sender);
    return details ? out + paren(op_details(e)) : out;
  }

  std::set<std::string> waiter_statuses(const Stall &s) const {
    std::set<std::string> out;
    for (const auto &w : s.waiters) out.insert(w.second->pending() ? "still waiting" : w.second->status);
    return out;
  }

  int64_t earliest_waiter_dump(const Stall &s) const {
    int64_t t = std::numeric_limits<int64_t>::max();
    for (const auto &w : s.waiters) t = std::min(t, dump(w.first)->dumped_ns);
    return t;
  }

  const Stall *stall_of(const TraceEntry *e) const {
    for (const Stall &s : stalls_)
      for (const auto &w : s.waiters)
        if (w.second == e) return &s;
    return nullptr;
  }

  // What a behind rank does instead, without the subject: "is idle outside pstate, ...".
  std::string doing(int rank, int64_t reference_ns) const {
    const TraceDump &d = *dump(rank);
    if (d.in_call != "-") {
      const TraceEntry *w = nullptr;
      for (const TraceEntry &e : d.entries)
        if (is_waiting(e) && e.cls != "life" && !recovered(group_of(d, e.gid))) w = &e;  // not a wait of an older world
      if (!w) return "is inside " + d.in_call;
      std::string out = "is inside " + d.in_call + ", waiting in " + w->op + " #" + std::to_string(w->seq) + " of " +
                        group(group_of(d, w->gid)).label;
      const Stall *s = stall_of(w);
      if (s && !s->blockers().empty())
        out += ", which " + ranks_phrase(s->blockers()) + " never " + (s->p2p ? "matched" : "called");
      return out;
    }
    int64_t last = kNone;
    for (const TraceEntry &e : d.entries) last = std::max(last, e.ended_ns);
    if (last == kNone) return "is idle outside pstate and has no pstate call recorded";
    return "is idle outside pstate, last call returned " + seconds(reference_ns - last) + " earlier";
  }

  Finding behind_finding(const Stall &s) const {
    Finding f;
    f.kind = "behind";
    f.group = group(s.group).name;
    f.epoch = group(s.group).epoch;
    f.seq = s.seq;
    f.op = s.waiters.begin()->second->op;
    f.ranks = s.behind;
    f.waiting_ranks = s.waiter_ranks();
    std::set<std::string> statuses = waiter_statuses(s);
    bool still = statuses.size() == 1 && *statuses.begin() == "still waiting";
    std::string verb = still ? (s.waiters.size() == 1 ? " waits in " : " wait in ") : " waited in ";
    std::string never = "never called";
    if (s.p2p) never = s.waiters.begin()->second->is_send() ? "never received" : "never sent";
    f.text = ranks_phrase(s.behind) + (s.behind.size() == 1 ? " is" : " are") + " behind on " + group(s.group).label + ": " +
             ranks_phrase(f.waiting_ranks) + verb + stall_op(s, true);
    if (!still) {
      std::string list;
      for (const std::string &st : statuses) list += (list.empty() ? "" : ", ") + st;
      f.text += " (" + list + ")";
    }
    f.text += " that " + ranks_phrase(s.behind) + " " + never;
    int64_t ref = earliest_waiter_dump(s);
    if (s.behind.size() == 1) {
      f.text += " (it " + doing(s.behind[0], ref) + ")";
    } else {
      std::string each;
      for (int r : s.behind) each += (each.empty() ? "" : "; ") + ("rank " + std::to_string(r) + " " + doing(r, ref));
      f.text += " (" + each + ")";
    }
    if (!s.missing.empty()) f.text += "; " + ranks_phrase(s.missing) + " left no dump" + since_epoch(s);
    return f;
  }

  Finding missing_finding(const Stall &s) const {
    Finding f;
    f.kind = "missing";
    f.group = group(s.group).name;
    f.epoch = group(s.group).epoch;
    f.seq = s.seq;
    f.op = s.waiters.begin()->second->op;
    f.ranks = s.missing;
    f.waiting_ranks = s.waiter_ranks();
    bool one = s.missing.size() == 1;
    std::set<std::string> statuses = waiter_statuses(s);
    if (statuses.count("PEER_LOST")) {
      f.text = ranks_phrase(s.missing) + " left no dump" + since_epoch(s) + ": " +
               (one ? "its peers lost it" : "their peers lost them") + " (PEER_LOST in " + stall_op(s, false) + " on " +
               group(s.group).label +
               "): " + (one ? "it died or was killed" : "they died or were killed");
      return f;
    }
    std::string list;
    for (const std::string &st : statuses) list += (list.empty() ? "" : ", ") + st;
    f.text = ranks_phrase(s.missing) + " left no dump" + since_epoch(s) + " and never arrived at " + stall_op(s, false) +
             " of " + group(s.group).label +
             " where " + ranks_phrase(f.waiting_ranks) + " waited (" + list +
             "): " + (one ? "it is stopped, hung or dead" : "they are stopped, hung or dead");
    return f;
  }

  // " of epoch 1 (only an older one, from before the world was rebuilt)" when some of s's missing
  // ranks did dump, but before the world of s's epoch; "" otherwise.
  std::string since_epoch(const Stall &s) const {
    for (int m : s.missing)
      if (stale(m, group(s.group)))
        return " of epoch " + std::to_string(group(s.group).epoch) +
               (s.missing.size() == 1 ? " (only an older one" : " (or only an older one") +
               ", from before the world was rebuilt)";
    return "";
  }

  Finding stuck_finding(const Stall &s) const {
    Finding f;
    f.kind = "stuck";
    f.group = group(s.group).name;
    f.epoch = group(s.group).epoch;
    f.seq = s.seq;
    f.op = s.waiters.begin()->second->op;
    f.waiting_ranks = s.waiter_ranks();
    const TraceEntry &e = *s.waiters.begin()->second;
    f.text = ranks_phrase(f.waiting_ranks) + " of " + group(s.group).label + " " + (f.waiting_ranks.size() == 1 ? "is" : "are") +
             " stuck in " + stall_op(s, true) + " although every rank involved called it (" + e.state +
             (e.status != "-" ? " " + e.status : "") + (e.path != "-" ? " via " + e.path : "") +
             "): the transfer did not finish, no rank stayed away";
    return f;
  }

  // ---- the verdict ------------------------------------------------------------------------------

  // What the survivors of an earlier epoch recovered from, said as such.
  Finding as_recovered(Finding f) const {
    f.kind = "recovered";
    f.text = "before the world was rebuilt (epoch " + std::to_string(f.epoch) + "; now epoch " +
             std::to_string(diag_.epoch) + "): " + f.text;
    return f;
  }

  // The members of the world of the latest epoch (global ranks as the dumps write them).
  std::vector<int> latest_world() const {
    for (const GroupProgress &g : groups_)
      if (g.epoch == diag_.epoch && is_world(g.name)) return g.members;
    return {};
  }

  void decide() {
    std::vector<Finding> recovered_findings;
    std::set<int> explained_missing;
    {
      std::vector<Stall> current;
      for (Stall &s : stalls_) {
        if (!recovered(s.group)) {
          current.push_back(std::move(s));
          continue;
        }
        if (!s.behind.empty()) recovered_findings.push_back(as_recovered(behind_finding(s)));
        if (!s.missing.empty()) recovered_findings.push_back(as_recovered(missing_finding(s)));
        explained_missing.insert(s.missing.begin(), s.missing.end());
      }
      stalls_ = std::move(current);
    }
    std::set<int> waiting;
    for (const Stall &s : stalls_)
      for (const auto &w : s.waiters) waiting.insert(w.first);
    auto sinks_of = [&](const Stall &s) {
      std::vector<int> out;
      for (int b : s.blockers())
        if (!waiting.count(b)) out.push_back(b);
      return out;
    };
    auto tier = [&](const Stall &s) {
      size_t blockers = s.blockers().size(), sinks = sinks_of(s).size();
      if (blockers == 0) return 3;
      if (sinks == blockers) return 0;
      return sinks > 0 ? 1 : 2;
    };
    std::vector<const Stall *> order;
    for (const Stall &s : stalls_) order.push_back(&s);
    std::stable_sort(order.begin(), order.end(), [&](const Stall *a, const Stall *b) {
      return std::make_tuple(tier(*a), -static_cast<long>(a->waiters.size()), a->first_posted) <
             std::make_tuple(tier(*b), -static_cast<long>(b->waiters.size()), b->first_posted);
    });

    // The findings in verdict order: mismatches, stalls some rank stayed away from, missing ranks
    // no one waited for, other failures, stalls every rank called. The first kind found names the
    // culprits.
    std::vector<Finding> findings;
    std::vector<int> culprits;
    auto first_of_kind = [&](size_t before) { return before == 0 && !findings.empty(); };

    for (const auto &m : mismatches_) findings.push_back(m.second);
    if (!findings.empty()) culprits = findings.front().ranks;

    std::vector<const Stall *> stuck;
    size_t before = findings.size();
    for (const Stall *s : order) {
      if (s->blockers().empty()) {
        stuck.push_back(s);
        continue;
      }
      if (!s->behind.empty()) findings.push_back(behind_finding(*s));
      if (!s->missing.empty()) findings.push_back(missing_finding(*s));
      explained_missing.insert(s->missing.begin(), s->missing.end());
    }
    if (first_of_kind(before)) {
      const Stall &s = *order.front();
      culprits = tier(s) < 2 ? sinks_of(s) : s.blockers();
      if (tier(s) == 2)
        findings.front().text += "; a cycle: the ranks call collectives on these groups in different orders";
    }

    before = findings.size();
    const std::vector<int> world_now = latest_world();
    for (int m : diag_.missing)
      if (!explained_missing.count(m) && diag_.epoch > 0 && !world_now.empty() &&
          std::find(world_now.begin(), world_now.end(), m) == world_now.end()) {
        Finding f;
        f.kind = "recovered";
        f.ranks = {m};
        f.text = "rank " + std::to_string(m) + " left no dump and is not in the world of epoch " +
                 std::to_string(diag_.epoch) + ": the survivors went on without it (pstate_shrink)";
        recovered_findings.push_back(f);
        explained_missing.insert(m);
      }
    for (int m : diag_.missing)
      if (!explained_missing.count(m)) {
        Finding f;
        f.kind = "missing";
        f.ranks = {m};
        f.text = "rank " + std::to_string(m) + " left no dump, and no dump shows a rank waiting for it" +
                 " (was its file not copied, or did it exit before the others dumped?)";
        if (before == 0) culprits.push_back(m);
        findings.push_back(f);
      }

    before = findings.size();
    for (const TraceDump &d : job_.dumps)
      for (const TraceEntry &e : d.entries) {
        if (!e.failed() || is_waiting(e) || e.cls == "life") continue;
        int g = group_of(d, e.gid);
        if (e.cls == "coll" && mismatched_.count({g, e.seq})) continue;
        Finding f;
        f.kind = "failed";
        f.group = group(g).name;
        f.epoch = group(g).epoch;
        f.seq = e.seq;
        f.op = e.op;
        f.ranks = {d.rank};
        f.text = "rank " + std::to_string(d.rank) + "'s " + where(g, e.seq, e) + " failed with " + e.status +
                 (d.failure != "-" ? " (" + d.failure + ")" : "");
        if (recovered(g)) {
          recovered_findings.push_back(as_recovered(f));
          continue;
        }
        findings.push_back(f);
      }
    if (first_of_kind(before)) culprits = findings.front().ranks;

    for (const Stall *s : stuck) findings.push_back(stuck_finding(*s));  // no culprit rank

    const bool none = findings.empty();
    findings.insert(findings.end(), recovered_findings.begin(), recovered_findings.end());
    diag_.findings = findings;
    diag_.culprits = culprits;
    if (none) {
      diag_.exit_status = 0;
      diag_.verdict =
          "pstate doctor: no problem found in " + std::to_string(job_.dumps.size()) + " dumps of job " + job_.job;
      if (!findings.empty())
        diag_.verdict += " (its world of epoch " + std::to_string(diag_.epoch) + "; " +
                         std::to_string(findings.size()) + " recovered " +
                         (findings.size() == 1 ? "problem" : "problems") + " before it, listed below)";
    } else {
      diag_.exit_status = 1;
      diag_.verdict = "pstate doctor: " + findings.front().text;
    }
  }

  // ---- evidence -----------------------------------------------------------------------------------

  std::string entry_line(const TraceDump &d, const TraceEntry &e) const {
    std::string what = e.op + (e.seq != kNone ? " #" + std::to_string(e.seq) : "");
    if (e.cls == "p2p") {
      int peer = group(group_of(d, e.gid)).members[e.peer];
      what += (e.is_send() ? " to rank " : " from rank ") + std::to_string(peer);
    }
    what += paren(op_details(e));
    std::string via = e.path != "-" ? " via " + e.path : "";
    if (e.pending())
      return "waits in " + what + " since " + seconds(d.dumped_ns - e.posted_ns) + " before its dump (" + e.state +
             via + ")";
    std::string ended =
        e.ended_ns != kNone ? ", returned " + seconds(d.dumped_ns - e.ended_ns) + " before its dump" : "";
    return "last " + what + ": " + e.state + " " + e.status + via + ended;
  }

  // No member started a collective on it and no dump kept an entry of it (a singleton group of a
  // layout the job never used, say).
  bool unused_group(const GroupProgress &gp, int g) const {
    for (int m : gp.members) {
      auto it = gp.collectives.find(m);
      if (it != gp.collectives.end() && it->second != 0) return false;
      if (const TraceDump *d = dump(m))
        for (const TraceEntry &e : d->entries)
          if (e.gid != kNone && group_of(*d, static_cast<int>(e.gid)) == g) return false;
    }
    return true;
  }

  void write_evidence() {
    auto &ev = diag_.evidence;
    // The verdict says the first finding, unless there is no current one (only recovered ones).
    for (size_t i = diag_.exit_status == 0 ? 0 : 1; i < diag_.findings.size(); ++i)
      ev.push_back((diag_.findings[i].kind == "recovered" ? "recovered: " : "also: ") + diag_.findings[i].text);
    std::string unused;  // groups nobody used: one line for all of them
    for (size_t g = 0; g < groups_.size(); ++g) {
      const GroupProgress &gp = groups_[g];
      if (unused_group(gp, static_cast<int>(g))) {
        unused += (unused.empty() ? "" : ", ") + gp.label;
        continue;
      }
      std::string members, progress;
      for (int m : gp.members) {
        members += (members.empty() ? "" : ",") + std::to_string(m);
        auto it = gp.collectives.find(m);
        progress += (progress.empty() ? "" : ", ") + ("rank " + std::to_string(m) + " ") +
                    (it == gp.collectives.end() ? std::string("?") : std::to_string(it->second));
      }
      ev.push_back("group " + gp.label + " (ranks " + members + "): collectives called: " + progress);
      for (int m : gp.members) {
        const TraceDump *d = dump(m);
        if (!d) {
          ev.push_back("  rank " + std::to_string(m) + ": no dump");
          continue;
        }
        if (!dumped_in(m, gp)) {
          const std::string span = d->first_epoch == d->epoch
                                       ? "epoch " + std::to_string(d->epoch)
                                       : "epochs " + std::to_string(d->first_epoch) + "-" + std::to_string(d->epoch);
          ev.push_back("  rank " + std::to_string(m) + ": no dump of epoch " + std::to_string(gp.epoch) + " (its dump is of " +
                       span + ")");
          continue;
        }
        const TraceEntry *last = nullptr;
        for (const TraceEntry &e : d->entries)
          if (e.cls != "life" && group_of(*d, e.gid) == static_cast<int>(g)) last = &e;
        ev.push_back("  rank " + std::to_string(m) + ": " + (last ? entry_line(*d, *last) : "no entry kept"));
      }
    }
    if (!unused.empty()) ev.push_back("groups with no operation recorded: " + unused);
    for (const TraceDump &d : job_.dumps) {
      std::string state =
          d.in_call == "-"
              ? "idle outside pstate"
              : "inside " + d.in_call +
                    (d.in_call_since_ns != kNone ? " for " + seconds(d.dumped_ns - d.in_call_since_ns) : std::string());
      ev.push_back("rank " + std::to_string(d.rank) + " (" + d.host + ", pid " + std::to_string(d.pid) + ", " + d.file +
                   "): dumped for " + d.reason + "; " + state + (d.failure != "-" ? "; failure: " + d.failure : ""));
    }
    if (!diag_.missing.empty())
      ev.push_back("no dump from " + ranks_phrase(diag_.missing) + " of world " + std::to_string(job_.world));
    if (job_.ignored_dumps > 0) {
      std::string jobs;
      for (const std::string &j : job_.ignored_jobs) jobs += (jobs.empty() ? "" : ", ") + j;
      ev.push_back("ignored " + std::to_string(job_.ignored_dumps) + " dumps of other jobs (" + jobs + "): job " +
                   job_.job + " dumped last");
    }
  }

  const JobDumps &job_;
  Diagnosis diag_;
  std::map<int, const TraceDump *> by_rank_;
  std::vector<GroupProgress> groups_;
  std::map<std::pair<int, int>, int> dump_group_;  // (rank, gid) -> group index
  std::map<std::pair<int, int64_t>, std::map<int, const TraceEntry *>> coll_;
  std::vector<std::pair<int64_t, Finding>> mismatches_;  // (first posted, finding)
  std::set<std::pair<int, int64_t>> mismatched_;
  std::vector<Stall> stalls_;
};

std::string int_array(const std::vector<int> &v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

}  // namespace

Diagnosis diagnose(const JobDumps &job) {
  return Analysis(job).run();
}

std::string diagnosis_json(const JobDumps &job, const Diagnosis &d) {
  std::string out = "{\"verdict\": " + json_string(d.verdict) + ", \"exit_status\": " + std::to_string(d.exit_status);
  out += ", \"job\": " + json_string(job.job) + ", \"world\": " + std::to_string(job.world) +
         ", \"epoch\": " + std::to_string(d.epoch);
  out +=
      ", \"dumps\": " + std::to_string(job.dumps.size()) + ", \"ignored_dumps\": " + std::to_string(job.ignored_dumps);
  out += ", \"culprit_ranks\": " + int_array(d.culprits) + ", \"missing_ranks\": " + int_array(d.missing);
  out += ", \"findings\": [";
  for (size_t i = 0; i < d.findings.size(); ++i) {
    const Finding &f = d.findings[i];
    out += std::string(i ? ", " : "") + "{\"kind\": " + json_string(f.kind);
    out += ", \"group\": " + (f.group.empty() ? "null" : json_string(f.group));
    out += ", \"seq\": " + (f.seq == kNone ? "null" : std::to_string(f.seq));
    out += ", \"op\": " + (f.op.empty() ? "null" : json_string(f.op)) + ", \"epoch\": " + std::to_string(f.epoch);
    out += ", \"ranks\": " + int_array(f.ranks) + ", \"waiting_ranks\": " + int_array(f.waiting_ranks);
    out += ", \"text\": " + json_string(f.text) + "}";
  }
  out += "], \"groups\": [";
  for (size_t i = 0; i < d.groups.size(); ++i) {
    const GroupProgress &g = d.groups[i];
    out += std::string(i ? ", " : "") + "{\"name\": " + json_string(g.name) + ", \"epoch\": " + std::to_string(g.epoch) +
           ", \"members\": " + int_array(g.members) +
           ", \"progress\": {";
    const char *sep = "";
    for (const auto &[rank, n] : g.collectives) {
      out += sep + json_string(std::to_string(rank)) + ": " + std::to_string(n);
      sep = ", ";
    }
    out += "}}";
  }
  out += "], \"ranks\": [";
  for (size_t i = 0; i < job.dumps.size(); ++i) {
    const TraceDump &r = job.dumps[i];
    out += std::string(i ? ", " : "") + "{\"rank\": " + std::to_string(r.rank) + ", \"host\": " + json_string(r.host) +
           ", \"pid\": " + std::to_string(r.pid) + ", \"file\": " + json_string(r.file) +
           ", \"reason\": " + json_string(r.reason) +
           ", \"in_call\": " + (r.in_call == "-" ? "null" : json_string(r.in_call)) +
           ", \"dumped_unix_ns\": " + std::to_string(r.dumped_ns) + "}";
  }
  return out + "]}\n";
}

}  // namespace pstate::cli
