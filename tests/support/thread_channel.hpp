// tests/support/thread_channel.hpp: in the one folder of test helpers (every suite's, found
// through pstate_test_support's include path); used by tests/unit/test_coll_*.cpp and
// test_agreement_records.cpp.
//
// thread_channel.hpp — THE ALGORITHM UNIT-TEST HARNESS: an in-process pstate::Channel whose ranks
// are threads, so src/coll/ algorithms can be tested for every group size without a transport.
//
// This is not a transport and not a mock of one for the spec tests: the end-to-end tests run the
// same algorithms over UCX between processes. It models what the algorithms may rely on and
// nothing more:
//   - Tag matching per (source, destination, tag) in post order, like UCX/MPI: a send is matched
//     to the oldest posted receive of its key, or waits as "unexpected" for the next one.
//   - Rendezvous semantics: a send completes only when a receive has taken its bytes, and the
//     bytes are copied from the sender's buffer at that moment. An algorithm that reuses a send
//     buffer before wait_all, or that blocks in send before posting its receive, fails here as
//     it would over a real transport (a timeout, not a hang).
//   - A size mismatch between send and receive fails both sides with PSTATE_ERR_MISMATCH.
//   - Every wait has a deadline; on timeout or on any rank's exception the whole fabric aborts,
//     so every rank's next wait throws at once and the test fails instead of hanging.
//   - After all ranks return, run_ranks() checks that no message was left unmatched.
//
// Usage: std::string err = run_ranks(5, [&](pstate::Channel &ch) { ...algorithm... });
//        err is empty on success, else it names the rank(s) and what went wrong.
#pragma once

#include "coll/channel.hpp"
#include "common/error.hpp"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace ptest {

class ThreadFabric {
 public:
  explicit ThreadFabric(int size, std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : size_(size), timeout_(timeout), wakeups_(static_cast<size_t>(size)) {
    for (int r = 0; r < size; ++r) channels_.push_back(std::make_unique<RankChannel>(this, r));
  }

  int size() const { return size_; }
  pstate::Channel &channel(int rank) { return *channels_.at(static_cast<size_t>(rank)); }

  // Makes every current and future wait of every rank throw (first reason wins).
  void abort(const std::string &why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_) {
      aborted_ = true;
      abort_reason_ = why;
    }
    for (auto &cv : wakeups_) cv.notify_all();
  }

  // Messages posted but never matched, one line each ("" when clean).
  std::string unmatched() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (auto *queues : {&sends_, &recvs_}) {
      for (auto &[key, q] : *queues) {
        for (auto &op : q)
          out += pstate::cat(op->is_send ? "unmatched send " : "unmatched receive ", std::get<0>(key), " -> ",
                             std::get<1>(key), " tag 0x", std::hex, std::get<2>(key), std::dec, " (",
                             op->is_send ? op->sbytes : op->rbytes, " bytes)\n");
      }
    }
    return out;
  }

  uint64_t messages() const { return messages_; }

 private:
  using Key = std::tuple<int, int, uint32_t>;  // source, destination, tag

  struct Op {
    int owner = 0;  // the rank that posted it (and waits for it)
    bool is_send = false;
    const void *sbuf = nullptr;
    size_t sbytes = 0;
    void *rbuf = nullptr;
    size_t rbytes = 0;
    std::vector<uint8_t> *any = nullptr;  // irecv_any_size
    size_t *upto = nullptr;               // irecv_upto: the length that arrived
    bool done = false;
    std::string error;
  };

  class RankChannel final : public pstate::Channel {
   public:
    RankChannel(ThreadFabric *fabric, int rank) : fabric_(fabric), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return fabric_->size_; }

    Request isend(int peer, const void *buf, size_t bytes, uint32_t tag) override {
      auto op = std::make_shared<Op>();
      op->owner = rank_;
      op->is_send = true;
      op->sbuf = buf;
      op->sbytes = bytes;
      fabric_->post(Key{rank_, checked(peer, "isend"), tag}, op);
      return remember(op);
    }
    Request irecv(int peer, void *buf, size_t bytes, uint32_t tag) override {
      auto op = std::make_shared<Op>();
      op->owner = rank_;
      op->rbuf = buf;
      op->rbytes = bytes;
      fabric_->post(Key{checked(peer, "irecv"), rank_, tag}, op);
      return remember(op);
    }
    Request irecv_any_size(int peer, std::vector<uint8_t> *out, uint32_t tag) override {
      auto op = std::make_shared<Op>();
      op->owner = rank_;
      op->any = out;
      fabric_->post(Key{checked(peer, "irecv_any_size"), rank_, tag}, op);
      return remember(op);
    }
    Request irecv_upto(int peer, void *buf, size_t capacity, uint32_t tag, size_t *received) override {
      auto op = std::make_shared<Op>();
      op->owner = rank_;
      op->rbuf = buf;
      op->rbytes = capacity;
      op->upto = received;
      fabric_->post(Key{checked(peer, "irecv_upto"), rank_, tag}, op);
      return remember(op);
    }
    void wait_all(const Request *requests, size_t n) override {
      for (size_t i = 0; i < n; ++i) {
        auto it = pending_.find(requests[i]);
        if (it == pending_.end())
          pstate::throw_error(PSTATE_ERR_INTERNAL, "rank ", rank_, ": wait_all on unknown request ", requests[i]);
        std::shared_ptr<Op> op = it->second;
        pending_.erase(it);
        fabric_->wait(rank_, *op);
      }
    }

   private:
    int checked(int peer, const char *what) const {
      if (peer < 0 || peer >= fabric_->size_)
        pstate::throw_error(PSTATE_ERR_INVALID_ARGUMENT, "rank ", rank_, ": ", what, " to peer ", peer,
                            " outside group of ", fabric_->size_);
      return peer;
    }
    Request remember(std::shared_ptr<Op> op) {
      Request id = next_id_++;
      pending_.emplace(id, std::move(op));
      return id;
    }
    ThreadFabric *fabric_;
    int rank_;
    Request next_id_ = 1;
    std::unordered_map<Request, std::shared_ptr<Op>> pending_;  // touched by this rank's thread only
  };

  // Matches op against the oldest opposite operation of the same key, or queues it.
  // After an abort nothing is matched any more: a failed rank's buffers may be gone.
  void post(const Key &key, const std::shared_ptr<Op> &op) {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_)
      pstate::throw_error(PSTATE_ERR_ABORTED, "rank ", op->is_send ? std::get<0>(key) : std::get<1>(key),
                          ": aborted (", abort_reason_, ")");
    auto &opposite = op->is_send ? recvs_ : sends_;
    auto it = opposite.find(key);
    if (it == opposite.end() || it->second.empty()) {
      (op->is_send ? sends_ : recvs_)[key].push_back(op);
      return;
    }
    std::shared_ptr<Op> other = it->second.front();
    it->second.pop_front();
    if (it->second.empty()) opposite.erase(it);
    deliver(key, op->is_send ? *op : *other, op->is_send ? *other : *op);
  }

  void deliver(const Key &key, Op &send, Op &recv) {
    ++messages_;
    if (recv.any != nullptr) {
      auto *p = static_cast<const uint8_t *>(send.sbuf);
      recv.any->assign(p, p + send.sbytes);
    } else if (recv.upto != nullptr && send.sbytes <= recv.rbytes) {
      if (send.sbytes != 0) std::memcpy(recv.rbuf, send.sbuf, send.sbytes);
      *recv.upto = send.sbytes;
    } else if (send.sbytes != recv.rbytes) {
      send.error = recv.error = pstate::cat("message ", std::get<0>(key), " -> ", std::get<1>(key), " tag 0x",
                                            std::hex, std::get<2>(key), std::dec, " has ", send.sbytes,
                                            " bytes but the receive expects ", recv.rbytes);
    } else if (send.sbytes != 0) {
      std::memcpy(recv.rbuf, send.sbuf, send.sbytes);
    }
    send.done = recv.done = true;
    wakeups_[static_cast<size_t>(send.owner)].notify_all();
    wakeups_[static_cast<size_t>(recv.owner)].notify_all();
  }

  void wait(int rank, Op &op) {
    std::unique_lock<std::mutex> lock(mu_);
    bool finished = wakeups_[static_cast<size_t>(rank)].wait_for(lock, timeout_, [&] { return op.done || aborted_; });
    if (op.done && !op.error.empty()) {
      lock.unlock();
      abort(pstate::cat("rank ", rank, ": ", op.error));
      pstate::throw_error(PSTATE_ERR_MISMATCH, "rank ", rank, ": ", op.error);
    }
    if (op.done) return;
    if (aborted_) pstate::throw_error(PSTATE_ERR_ABORTED, "rank ", rank, ": aborted (", abort_reason_, ")");
    if (!finished) {
      lock.unlock();
      std::string why = pstate::cat("rank ", rank, ": ", op.is_send ? "send" : "receive", " not matched within ",
                                    timeout_.count(), " ms (deadlock or missing peer operation)");
      abort(why);
      pstate::throw_error(PSTATE_ERR_TIMEOUT, why);
    }
  }

  const int size_;
  const std::chrono::milliseconds timeout_;
  std::vector<std::condition_variable> wakeups_;  // one per rank: a delivery wakes only its two ranks
  std::vector<std::unique_ptr<RankChannel>> channels_;
  std::mutex mu_;
  std::map<Key, std::deque<std::shared_ptr<Op>>> sends_, recvs_;
  bool aborted_ = false;
  std::string abort_reason_;
  uint64_t messages_ = 0;
};

// Runs body(channel of rank r) on `size` threads. Returns "" when every rank returned and no
// message was left unmatched; otherwise the failures, one line per rank.
inline std::string run_ranks(int size, const std::function<void(pstate::Channel &)> &body,
                             std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  ThreadFabric fabric(size, timeout);
  std::vector<std::string> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(fabric.channel(r));
      } catch (const std::exception &e) {
        errors[static_cast<size_t>(r)] = e.what();
        fabric.abort(pstate::cat("rank ", r, " threw: ", e.what()));
      }
    });
  }
  for (auto &t : threads) t.join();
  std::string out;
  for (int r = 0; r < size; ++r)
    if (!errors[static_cast<size_t>(r)].empty()) out += pstate::cat("rank ", r, ": ", errors[static_cast<size_t>(r)], "\n");
  if (out.empty()) out = fabric.unmatched();
  return out;
}

}  // namespace ptest
