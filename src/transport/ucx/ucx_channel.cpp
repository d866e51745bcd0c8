// ucx_channel.cpp — UcxChannel: group ranks to world ranks, 32-bit algorithm tags to the full
// 64-bit UCX tag, and the current operation's deadline and name into every wait.
#include "transport/ucx/ucx_channel.hpp"

#include "transport/ucx/ucx_tag.hpp"

#include <algorithm>
#include <unordered_set>

namespace pstate {

UcxChannel::UcxChannel(UcxWorker &worker, std::vector<int> world_ranks, int my_index, uint32_t group_id,
                       std::string name)
    : worker_(worker),
      world_ranks_(std::move(world_ranks)),
      my_index_(my_index),
      group_id_(group_id),
      name_(std::move(name)),
      owner_(worker.register_owner()) {
  if (world_ranks_.empty()) throw_error(PSTATE_ERR_INVALID_ARGUMENT, "ucx channel ", name_, ": no ranks");
  if (my_index_ < 0 || my_index_ >= size())
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "ucx channel ", name_, ": my index ", my_index_, " is outside 0..",
                size() - 1);
  if (world_ranks_[static_cast<size_t>(my_index_)] != worker_.world_rank())
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, "ucx channel ", name_, ": group rank ", my_index_, " is world rank ",
                world_ranks_[static_cast<size_t>(my_index_)], " but this worker is world rank ", worker_.world_rank());
  std::unordered_set<int> seen;
  for (int r : world_ranks_) {
    if (r < 0 || r >= worker_.world_size())
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "ucx channel ", name_, ": world rank ", r, " is outside 0..",
                  worker_.world_size() - 1);
    if (!seen.insert(r).second)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, "ucx channel ", name_, ": world rank ", r, " listed twice");
  }
  ucx::check_tag_fields(group_id_, worker_.world_size() - 1);
}

UcxChannel::~UcxChannel() { worker_.cancel_owner(owner_); }

void UcxChannel::check_peer(int peer, const char *call) const {
  if (peer < 0 || peer >= size())
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, op_name(), ": ", call, " to/from group rank ", peer,
                " but the group has ranks 0..", size() - 1);
}

// Point-to-point receives compare the tag's "what" field after arrival instead of matching it
// (ucx_tag.hpp), so a message of another kind or dtype is a MISMATCH, not a wait.
OpTarget UcxChannel::target(int peer, uint64_t tag) const {
  OpTarget t{owner_, world_ranks_[static_cast<size_t>(peer)], peer, tag};
  if (ucx::is_p2p_tag(tag)) t.check_mask = ucx::kP2PCheckMask;
  return t;
}

// Runs one post; if it throws (e.g. the peer directory failed), the channel's other outstanding
// requests are cancelled too, as after a failed wait.
template <typename Post>
Channel::Request UcxChannel::post(Post &&post_op) {
  try {
    return post_op();
  } catch (...) {
    worker_.cancel_owner(owner_);
    throw;
  }
}

Channel::Request UcxChannel::isend(int peer, const void *buf, size_t bytes, uint32_t tag) {
  check_peer(peer, "send");
  uint64_t full = ucx::make_tag(group_id_, worker_.world_rank(), tag);
  return post([&] { return worker_.post_send(target(peer, full), buf, bytes); });
}

Channel::Request UcxChannel::irecv(int peer, void *buf, size_t bytes, uint32_t tag) {
  check_peer(peer, "receive");
  uint64_t full = ucx::make_tag(group_id_, world_rank_of(peer), tag);
  return post([&] { return worker_.post_recv(target(peer, full), buf, bytes); });
}

Channel::Request UcxChannel::irecv_upto(int peer, void *buf, size_t capacity, uint32_t tag, size_t *received) {
  check_peer(peer, "receive");
  uint64_t full = ucx::make_tag(group_id_, world_rank_of(peer), tag);
  return post([&] { return worker_.post_recv_upto(target(peer, full), buf, capacity, received); });
}

Channel::Request UcxChannel::irecv_any_size(int peer, std::vector<uint8_t> *out, uint32_t tag) {
  check_peer(peer, "receive");
  uint64_t full = ucx::make_tag(group_id_, world_rank_of(peer), tag);
  return post([&] { return worker_.post_recv_any_size(target(peer, full), out); });
}

Channel::Request UcxChannel::irecv_any_what(int peer, std::vector<uint8_t> *out, uint32_t tag) {
  check_peer(peer, "receive");
  OpTarget t = target(peer, ucx::make_tag(group_id_, world_rank_of(peer), tag));
  t.compare_checked = false;
  return post([&] { return worker_.post_recv_any_size(t, out); });
}

void UcxChannel::wait_all(const Request *requests, size_t n) {
  WaitScope scope;
  scope.owner = owner_;
  scope.what = name_;  // the message's "tp:0 all_reduce" is built only if one is
  scope.op = op_;
  scope.deadline = deadline_ ? *deadline_ : Deadline::after_ms(worker_.default_timeout_ms());
  scope.my_group_rank = my_index_;
  scope.position = position_;
  worker_.wait(requests, n, scope);
}

Channel::Request UcxChannel::isend_owned(uint32_t owner, int peer, const void *buf, size_t bytes, uint32_t tag) {
  check_peer(peer, "send");
  OpTarget t = target(peer, ucx::make_tag(group_id_, worker_.world_rank(), tag));
  t.owner = owner;
  return worker_.post_send(t, buf, bytes);  // a failed post leaves nothing of owner behind
}

Channel::Request UcxChannel::irecv_owned(uint32_t owner, int peer, void *buf, size_t bytes, uint32_t tag) {
  check_peer(peer, "receive");
  OpTarget t = target(peer, ucx::make_tag(group_id_, world_rank_of(peer), tag));
  t.owner = owner;
  return worker_.post_recv(t, buf, bytes);
}

namespace {
WaitScope owned_scope(uint32_t owner, std::string_view name, const char *op, Deadline deadline, int my_index,
                      const CallPosition *position) {
  WaitScope scope;
  scope.position = position;
  scope.owner = owner;
  scope.what = name;
  scope.op = op;
  scope.deadline = deadline;
  scope.my_group_rank = my_index;
  return scope;
}
}  // namespace

void UcxChannel::wait_owned(uint32_t owner, Request r, const char *op, Deadline deadline) {
  worker_.wait(&r, 1, owned_scope(owner, name_, op, deadline, my_index_, position_));
}

bool UcxChannel::test_owned(uint32_t owner, Request r, const char *op, Deadline deadline,
                            Deadline::Clock::time_point posted) {
  WaitScope scope = owned_scope(owner, name_, op, deadline, my_index_, position_);
  scope.since = posted;
  return worker_.test(r, scope);
}

}  // namespace pstate
