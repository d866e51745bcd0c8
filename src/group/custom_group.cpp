// custom_group.cpp — pstate_new_group: groups of the caller's choosing (SGLang's
// create_custom_parallel_group, vLLM's new_group), collective over the world.
//
// Every rank shares the list it passes with one all_gather_object over the world group, so every
// rank holds the same picture and checks it the same way, in this order:
//   1. each list on its own: given (not NULL with a count), at most world-size long, strictly
//      ascending, in range, and holding the rank that passed it (count 0 joins none);
//   2. distinct lists that share a rank overlap: INVALID_ARGUMENT naming both lists, who passed
//      them and the ranks they share;
//   3. a rank named by a list that joins none (count 0) disagrees with it: MISMATCH.
// After 1-3 every listed rank passed the same list. A violation is thrown on every rank with the
// same text before anything is created: the world group is untouched and stays usable.
//
// Ids and names: the groups of one call are disjoint, as the groups of one model-parallel kind
// are, so they share one group id (the UCX tag's group field carries the sender's world rank
// beside it; the first rank tells their shared-memory segments apart, see Group::shm_name). The
// custom calls take the upper half of the 12-bit id space (GroupRegistry::kFirstCustomGroupId..4094,
// one id per call, cycling; 4095 carries failure notices; the model-parallel kinds stay below it,
// group_registry.hpp), so a custom group never receives a message meant for another group. Names
// are "custom:<n>", n counting the custom groups of the world in creation order (the groups of one
// call by their first rank): the same on every member, distinct from every other group's.
//
// Lifetime: as the model-parallel groups: retired (handle kept, every call INVALID_STATE) by
// pstate_destroy_model_parallel, freed by pstate_finalize / pstate_abort.
#include "group/context.hpp"
#include "group/group.hpp"

#include <algorithm>
#include <cstring>
#include <map>

namespace pstate {

namespace {

// What one rank tells the others: a word saying whether its list could be read, the count it
// passed, then the list.
enum class ListState : int64_t { kGiven = 0, kNull = 1, kTooLong = 2 };

std::vector<int64_t> encode_list(const int *ranks, size_t count, int world_size) {
  std::vector<int64_t> words{static_cast<int64_t>(ListState::kGiven), static_cast<int64_t>(count)};
  if (count > 0 && ranks == nullptr) {
    words[0] = static_cast<int64_t>(ListState::kNull);
  } else if (count > static_cast<size_t>(world_size)) {
    words[0] = static_cast<int64_t>(ListState::kTooLong);  // not read: it cannot be a valid list
  } else {
    for (size_t i = 0; i < count; ++i) words.push_back(ranks[i]);
  }
  return words;
}

struct RankList {
  ListState state = ListState::kGiven;
  int64_t count = 0;
  std::vector<int64_t> ranks;
};

std::string list_text(const std::vector<int64_t> &ranks) {
  std::string s = "{";
  for (size_t i = 0; i < ranks.size(); ++i) s += cat(i ? "," : "", ranks[i]);
  return s + "}";
}

std::string ranks_text(const std::vector<int> &ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += cat(i ? "," : "", ranks[i]);
  return s;
}

// Why rank r's list cannot be a group, or "" when it can.
std::string list_problem(const RankList &l, int r, int world_size) {
  if (l.state == ListState::kNull) return cat("rank ", r, " passed ranks NULL with count ", l.count);
  if (l.state == ListState::kTooLong)
    return cat("rank ", r, " passed ", l.count, " ranks, more than the world's ", world_size);
  for (size_t i = 0; i < l.ranks.size(); ++i) {
    int64_t v = l.ranks[i];
    if (v < 0 || v >= world_size)
      return cat("rank ", r, " passed ", list_text(l.ranks), ": ", v, " is not a world rank (0..", world_size - 1, ")");
    if (i > 0 && v <= l.ranks[i - 1])
      return cat("rank ", r, " passed ", list_text(l.ranks), ": not strictly ascending (", l.ranks[i - 1], " then ", v,
                 ")");
  }
  if (!l.ranks.empty() && !std::binary_search(l.ranks.begin(), l.ranks.end(), int64_t{r}))
    return cat("rank ", r, " passed ", list_text(l.ranks), ", which does not contain rank ", r,
               " itself (a rank passes the group it joins, or count 0 to join none)");
  return "";
}

constexpr size_t kMaxNamed = 4;  // problems quoted in one message; the rest are counted

// Every rank's list from the all-gathered bytes (sizes: each rank's share).
std::vector<RankList> decode_lists(const Bytes &all, const std::vector<size_t> &sizes) {
  std::vector<RankList> lists(sizes.size());
  size_t at = 0;
  for (size_t r = 0; r < sizes.size(); ++r) {
    size_t words = sizes[r] / sizeof(int64_t);
    if (words < 2 || sizes[r] % sizeof(int64_t) != 0)
      throw_error(PSTATE_ERR_INTERNAL, "pstate_new_group: rank ", r, " sent ", sizes[r], " bytes");
    std::vector<int64_t> w(words);
    std::memcpy(w.data(), all.data() + at, sizes[r]);
    at += sizes[r];
    lists[r].state = static_cast<ListState>(w[0]);
    lists[r].count = w[1];
    lists[r].ranks.assign(w.begin() + 2, w.end());
  }
  return lists;
}

[[noreturn]] void refuse(pstate_status_t status, const std::vector<std::string> &problems, const char *fix) {
  std::string text;
  for (size_t i = 0; i < problems.size() && i < kMaxNamed; ++i) text += cat(i ? "; " : "", problems[i]);
  if (problems.size() > kMaxNamed) text += cat("; and ", problems.size() - kMaxNamed, " more");
  throw_error(status, "pstate_new_group: ", text, ": ", fix,
              "; no group was created, every rank got this error and the world group is still usable");
}

// Checks 1-3 of the file comment on every rank's list; throws the same error on every rank.
void check_lists(const std::vector<RankList> &lists, int w) {
  std::vector<std::string> problems;
  for (int r = 0; r < w; ++r) {
    std::string p = list_problem(lists[static_cast<size_t>(r)], r, w);
    if (!p.empty()) problems.push_back(p);
  }
  if (!problems.empty())
    refuse(PSTATE_ERR_INVALID_ARGUMENT, problems,
           "each rank passes the global ranks of the group it joins, strictly ascending, itself among them, or "
           "count 0 to join none");
  // Distinct lists and who passed each, in order of their first passer.
  std::map<std::vector<int64_t>, std::vector<int>> passers;
  for (int r = 0; r < w; ++r)
    if (!lists[static_cast<size_t>(r)].ranks.empty()) passers[lists[static_cast<size_t>(r)].ranks].push_back(r);
  std::vector<const std::vector<int64_t> *> distinct;
  for (const auto &[l, who] : passers) distinct.push_back(&l);
  for (size_t a = 0; a < distinct.size(); ++a) {
    for (size_t b = a + 1; b < distinct.size(); ++b) {
      std::vector<int64_t> shared;
      std::set_intersection(distinct[a]->begin(), distinct[a]->end(), distinct[b]->begin(), distinct[b]->end(),
                            std::back_inserter(shared));
      if (shared.empty()) continue;
      problems.push_back(cat(list_text(*distinct[a]), " (passed by rank", passers[*distinct[a]].size() > 1 ? "s " : " ",
                             ranks_text(passers[*distinct[a]]), ") and ", list_text(*distinct[b]), " (passed by rank",
                             passers[*distinct[b]].size() > 1 ? "s " : " ", ranks_text(passers[*distinct[b]]),
                             ") overlap at rank", shared.size() > 1 ? "s " : " ", list_text(shared)));
    }
  }
  if (!problems.empty())
    refuse(PSTATE_ERR_INVALID_ARGUMENT, problems,
           "groups may not overlap, and every rank of a group must pass the same list (call pstate_new_group once "
           "per set of disjoint groups)");
  for (const auto &[l, who] : passers) {
    for (int64_t q : l)
      if (lists[static_cast<size_t>(q)].ranks.empty())
        problems.push_back(cat("rank", who.size() > 1 ? "s " : " ", ranks_text(who), " passed ", list_text(l),
                               " but rank ", q, " passed count 0 (joins no group)"));
  }
  if (!problems.empty())
    refuse(PSTATE_ERR_MISMATCH, problems, "every rank of a group must pass the same list of ranks");
}

}  // namespace

Group *Context::new_group(const int *ranks, size_t count) {
  require_usable("pstate_new_group");
  require_not_capturing("pstate_new_group");
  const int w = world_size();
  std::vector<int64_t> mine = encode_list(ranks, count, w);
  std::vector<size_t> sizes;
  Bytes all = world()->all_gather_object(mine.data(), mine.size() * sizeof(int64_t), &sizes, OpKind::kNewGroup);
  const std::vector<RankList> lists = decode_lists(all, sizes);
  check_lists(lists, w);
  if (groups_.custom_calls_live() >= GroupRegistry::kCustomGroupIds)
    throw_error(PSTATE_ERR_INVALID_STATE, "pstate_new_group: ", groups_.custom_calls_live(),
                " calls made custom groups since the last pstate_destroy_model_parallel, the most that can live at "
                "once: destroy them (pstate_destroy_model_parallel) first; no group was created");
  // The call's groups in order of their first rank; this rank's is made, the others only counted.
  std::map<int64_t, const std::vector<int64_t> *> by_first;
  for (const auto &l : lists)
    if (!l.ranks.empty()) by_first.emplace(l.ranks.front(), &l.ranks);
  const uint32_t id = groups_.next_custom_group_id();
  Group *made = nullptr;
  uint32_t index = groups_.custom_groups_made();
  const auto &own = lists[static_cast<size_t>(rank())].ranks;
  for (const auto &[first, l] : by_first) {
    if (!own.empty() && first == own.front()) {
      std::vector<int> launch_ranks;
      for (int64_t g : *l) launch_ranks.push_back(launch_rank_of(static_cast<int>(g)));
      made = groups_.add_custom(make_group(PSTATE_GROUP_CUSTOM, index, launch_ranks, id));
    }
    ++index;
  }
  groups_.custom_call_done(index);
  // Device communicators (CUDA contexts): split from the world's when it exists, one split for the
  // whole call (every rank takes part, those in no group or in a group of one with no colour).
  bool any_shared = false;
  for (const auto &[first, l] : by_first) any_shared = any_shared || l->size() > 1;
  if (any_shared && split_from_world()) split_from_world_into(made);
  log_.info("new_group: ", by_first.size(), " group(s) made by this call, group id ", id,
            made != nullptr ? cat(", this rank in ", made->name()) : std::string(", this rank in none"));
  return made;
}

}  // namespace pstate
