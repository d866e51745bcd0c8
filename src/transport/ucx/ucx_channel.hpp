// ucx_channel.hpp — a Channel (src/transport/channel.hpp) over a UcxWorker: one group seen from one
// rank, so every collective in src/coll/ runs over UCX.
//
// A channel knows the group's world ranks (index = group rank), this rank's index, the group id
// that goes into bits 63..52 of every tag (ucx_tag.hpp), and the worker. The group layer calls
// set_deadline() and set_op_name() before each operation; every wait then honours that deadline
// and every error names the operation ("tp:0 all_reduce: rank 3 (group rank 1, pid 1234) exited
// while rank 0 (group rank 0) waited for its message ..."). Without set_deadline, each wait gets
// the worker's default timeout, so no wait is ever unbounded.
//
// Requests are the worker's op ids; after wait_all returns or throws they are released, and a
// throw (from a post or a wait) cancels every outstanding request of this channel. Destroying the
// channel cancels what is still outstanding. Same thread rules as the worker.
#pragma once

#include "transport/channel.hpp"
#include "common/deadline.hpp"
#include "transport/ucx/ucx_worker.hpp"

#include <optional>
#include <string>
#include <vector>

namespace pstate {

class UcxChannel final : public Channel {
 public:
  // world_ranks[i] is the world rank of group rank i; world_ranks[my_index] must be the worker's
  // rank. group_id < 4096 and unique among this rank's live groups (both ends must agree on it).
  UcxChannel(UcxWorker &worker, std::vector<int> world_ranks, int my_index, uint32_t group_id, std::string name);
  ~UcxChannel() override;
  UcxChannel(const UcxChannel &) = delete;
  UcxChannel &operator=(const UcxChannel &) = delete;

  int rank() const override { return my_index_; }
  int size() const override { return static_cast<int>(world_ranks_.size()); }
  Request isend(int peer, const void *buf, size_t bytes, uint32_t tag) override;
  Request irecv(int peer, void *buf, size_t bytes, uint32_t tag) override;
  Request irecv_any_size(int peer, std::vector<uint8_t> *out, uint32_t tag) override;
  Request irecv_upto(int peer, void *buf, size_t capacity, uint32_t tag, size_t *received) override;
  // A point-to-point receive of any size and any "what" (ucx_tag.hpp): for discarding messages
  // no call took (pstate_destroy_model_parallel).
  Request irecv_any_what(int peer, std::vector<uint8_t> *out, uint32_t tag);
  void wait_all(const Request *requests, size_t n) override;

  // The deadline of the current operation (kept until changed).
  void set_deadline(Deadline deadline) { deadline_ = deadline; }
  // The operation named in errors ("tp:0 all_reduce" = the channel's name, a space, op); op must
  // outlive the operation (a string literal). Kept until changed; nullptr = the name alone. The
  // text is only built when needed: this runs before every collective, and most never fail.
  void set_op_name(const char *op) { op_ = op; }
  std::string op_name() const { return op_ != nullptr ? name_ + " " + op_ : name_; }
  const char *op() const { return op_ != nullptr ? op_ : "call"; }

  // The group's collectives, which this channel's waits hand to failure notices (WaitScope).
  void set_position(const CallPosition *position) { position_ = position; }
  const std::string &name() const { return name_; }
  uint32_t group_id() const { return group_id_; }
  const std::vector<int> &world_ranks() const { return world_ranks_; }
  int world_rank_of(int group_rank) const { return world_ranks_.at(static_cast<size_t>(group_rank)); }
  UcxWorker &worker() { return worker_; }
  // ---- requests that outlive one operation (pstate_isend / pstate_irecv) ----
  // Each such request has an owner of its own (new_request_owner), not the channel's: a failed
  // collective or blocking call (which cancels the channel's owner) never cancels it, and its own
  // failure cancels only itself. `op` names it in errors as set_op_name does (a string literal).
  uint32_t new_request_owner() { return worker_.register_owner(); }
  Request isend_owned(uint32_t owner, int peer, const void *buf, size_t bytes, uint32_t tag);
  Request irecv_owned(uint32_t owner, int peer, void *buf, size_t bytes, uint32_t tag);
  void wait_owned(uint32_t owner, Request r, const char *op, Deadline deadline);
  // Never blocks; `posted` (when the request was posted) dates its timeout message.
  bool test_owned(uint32_t owner, Request r, const char *op, Deadline deadline, Deadline::Clock::time_point posted);
  void cancel_owned(uint32_t owner) noexcept { worker_.cancel_owner(owner); }

  // Requests posted and not yet waited for (leak checks in tests).
  size_t outstanding() const { return worker_.outstanding(owner_); }

 private:
  OpTarget target(int peer, uint64_t tag) const;
  void check_peer(int peer, const char *call) const;
  template <typename Post>
  Request post(Post &&post_op);

  UcxWorker &worker_;
  std::vector<int> world_ranks_;
  int my_index_;
  uint32_t group_id_;
  std::string name_;
  const char *op_ = nullptr;
  uint32_t owner_;
  std::optional<Deadline> deadline_;
  const CallPosition *position_ = nullptr;
};

}  // namespace pstate
