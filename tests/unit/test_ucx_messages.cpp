// test_ucx_messages.cpp — UCX transport: messages arrive whole, in order, in the right group.
//
// Two (or more) forked processes, each with its own UcxWorker, find each other through a temp
// directory (test_ucx_harness.hpp) and exchange tagged messages through UcxChannel. Payloads are
// a pattern computed from (sequence, index), so every byte is checked against a reference that
// does not depend on the transport.
#include "bootstrap/netif.hpp"
#include "test_ucx_harness.hpp"

#include "transport/ucx/ucx_tag.hpp"

using namespace ucxtest;
using pstate::Channel;

namespace {

constexpr int kLimitS = 120;

// Sizes across UCX's protocol switches: empty, short, eager, zero-copy, rendezvous, 64 MiB.
const std::vector<size_t> kSizes = {0,         1,         7,           8,          64,        1024,
                                    4096,      8193,      65536,       262144 + 5, 1u << 20,  (4u << 20) + 3,
                                    16u << 20, 64u << 20};

// Rank 0 sends each size, rank 1 checks it and echoes it back, rank 0 checks the echo.
void test_pingpong_sizes_0_to_64MiB_arrive_intact(void **) {
  TempDir dir;
  auto codes = run_ranks(2, kLimitS, [&](int rank) {
    UcxWorker w(test_options(rank, 2));
    join_via_files(w, dir.path());
    auto ch = world_channel(w);
    int other = 1 - rank;
    for (size_t i = 0; i < kSizes.size(); ++i) {
      std::vector<uint8_t> buf(kSizes[i]);
      if (rank == 0) {
        fill_pattern(buf, i);
        ch->send(other, buf.data(), buf.size(), 10);
        std::vector<uint8_t> back(kSizes[i]);
        ch->recv(other, back.data(), back.size(), 11);
        CHILD_CHECK(back == buf);
      } else {
        ch->recv(other, buf.data(), buf.size(), 10);
        CHILD_CHECK(matches_pattern(buf, i));
        ch->send(other, buf.data(), buf.size(), 11);
      }
    }
    CHILD_CHECK(ch->outstanding() == 0);
    w.close(Deadline::after_ms(5000));
    return 0;
  });
  assert_all_exit_zero(codes);
}

// 5000 messages with the same tag, posted before the receiver asks, mixing eager and rendezvous
// sizes: the receiver sees them in send order.
void test_many_messages_same_tag_arrive_in_order(void **) {
  TempDir dir;
  constexpr size_t kCount = 5000;
  auto size_of = [](size_t seq) -> size_t { return seq % 500 == 0 ? 200000 : 8 + seq % 64; };
  auto codes = run_ranks(2, kLimitS, [&](int rank) {
    UcxWorker w(test_options(rank, 2));
    join_via_files(w, dir.path());
    auto ch = world_channel(w);
    constexpr size_t kWindow = 64;
    for (size_t base = 0; base < kCount; base += kWindow) {
      std::vector<std::vector<uint8_t>> bufs;
      std::vector<Channel::Request> reqs;
      for (size_t seq = base; seq < base + kWindow && seq < kCount; ++seq) {
        bufs.emplace_back(size_of(seq));
        if (rank == 0) {
          fill_pattern(bufs.back(), seq);
          reqs.push_back(ch->isend(1, bufs.back().data(), bufs.back().size(), 5));
        }
      }
      if (rank == 1)  // post receives for the whole window; they must match in order
        for (auto &b : bufs) reqs.push_back(ch->irecv(0, b.data(), b.size(), 5));
      ch->wait_all(reqs.data(), reqs.size());
      if (rank == 1)
        for (size_t k = 0; k < bufs.size(); ++k) CHILD_CHECK(matches_pattern(bufs[k], base + k));
    }
    ch->send(1 - rank, nullptr, 0, 6);  // both done before closing
    ch->recv(1 - rank, nullptr, 0, 6);
    w.close(Deadline::after_ms(5000));
    return 0;
  });
  assert_all_exit_zero(codes);
}

// The receiver does not know sizes: irecv_any_size gets each message whole, in order.
void test_any_size_receive_gets_unknown_lengths_in_order(void **) {
  TempDir dir;
  const std::vector<size_t> sizes = {0, 13, 100000, 1, 10u << 20, 4096};
  auto codes = run_ranks(2, kLimitS, [&](int rank) {
    UcxWorker w(test_options(rank, 2));
    join_via_files(w, dir.path());
    auto ch = world_channel(w);
    if (rank == 0) {
      std::vector<std::vector<uint8_t>> bufs;
      for (size_t i = 0; i < sizes.size(); ++i) {
        bufs.emplace_back(sizes[i]);
        fill_pattern(bufs.back(), i);
      }
      std::vector<Channel::Request> reqs;
      for (auto &b : bufs) reqs.push_back(ch->isend(1, b.data(), b.size(), 77));
      ch->wait_all(reqs.data(), reqs.size());
    } else {
      std::vector<std::vector<uint8_t>> got(sizes.size());
      std::vector<Channel::Request> reqs;
      for (auto &g : got) reqs.push_back(ch->irecv_any_size(0, &g, 77));
      ch->wait_all(reqs.data(), reqs.size());
      for (size_t i = 0; i < sizes.size(); ++i) {
        CHILD_CHECK(got[i].size() == sizes[i]);
        CHILD_CHECK(matches_pattern(got[i], i));
      }
      std::vector<uint8_t> late;  // a receive posted after the message arrived
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      Channel::Request r = ch->irecv_any_size(0, &late, 78);
      ch->wait_all(&r, 1);
      CHILD_CHECK(late.size() == 3 && late[0] == 'a' && late[2] == 'c');
    }
    if (rank == 0) ch->send(1, "abc", 3, 78);
    ch->send(1 - rank, nullptr, 0, 6);
    ch->recv(1 - rank, nullptr, 0, 6);
    w.close(Deadline::after_ms(5000));
    return 0;
  });
  assert_all_exit_zero(codes);
}

// A receive of 8 bytes meeting a 16-byte message, and of 16 meeting 8: MISMATCH, not corruption.
void test_message_of_other_length_is_mismatch(void **) {
  TempDir dir;
  auto codes = run_ranks(2, kLimitS, [&](int rank) {
    UcxWorker w(test_options(rank, 2));
    join_via_files(w, dir.path());
    auto ch = world_channel(w);
    uint8_t big[16] = {1}, small[8] = {2};
    if (rank == 0) {
      ch->send(1, big, sizeof(big), 1);
      ch->send(1, small, sizeof(small), 2);
    } else {
      std::string msg;
      CHILD_CHECK(status_of([&] { ch->recv(0, small, sizeof(small), 1); }, &msg) == PSTATE_ERR_MISMATCH);
      std::fprintf(stderr, "expected error: %s\n", msg.c_str());
      CHILD_CHECK(status_of([&] { ch->recv(0, big, sizeof(big), 2); }, &msg) == PSTATE_ERR_MISMATCH);
      std::fprintf(stderr, "expected error: %s\n", msg.c_str());
      CHILD_CHECK(ch->outstanding() == 0);
    }
    ch->send(1 - rank, nullptr, 0, 6);
    ch->recv(1 - rank, nullptr, 0, 6);
    w.close(Deadline::after_ms(5000));
    return 0;
  });
  assert_all_exit_zero(codes);
}

// Two groups over the same ranks using the same algorithm tags never take each other's messages,
// even when the receives are posted in the opposite order.
void test_groups_with_same_tags_do_not_steal_messages(void **) {
  TempDir dir;
  auto codes = run_ranks(2, kLimitS, [&](int rank) {
    UcxWorker w(test_options(rank, 2));
    join_via_files(w, dir.path());
    auto a = world_channel(w, 3, "a");
    auto b = world_channel(w, 4, "b");
    int32_t va = 111, vb = 222, ra = 0, rb = 0;
    if (rank == 0) {
      a->send(1, &va, 4, 9);
      b->send(1, &vb, 4, 9);
    } else {
      Channel::Request r[2] = {b->irecv(0, &rb, 4, 9), a->irecv(0, &ra, 4, 9)};
      b->wait_all(&r[0], 1);
      a->wait_all(&r[1], 1);
      CHILD_CHECK(ra == 111 && rb == 222);
    }
    a->send(1 - rank, nullptr, 0, 6);
    a->recv(1 - rank, nullptr, 0, 6);
    w.close(Deadline::after_ms(5000));
    return 0;
  });
  assert_all_exit_zero(codes);
}

// Between processes of one host UCX picks shared memory (when UCX_TLS leaves it the choice),
// and connect() creates the endpoint ahead of the first message.
void test_same_host_endpoint_uses_shared_memory(void **) {
  if (std::getenv("UCX_TLS") != nullptr) skip();
  TempDir dir;
  auto codes = run_ranks(2, kLimitS, [&](int rank) {
    UcxWorker w(test_options(rank, 2));
    join_via_files(w, dir.path());
    w.connect(1 - rank);
    std::string lanes = w.describe_endpoint(1 - rank);
    std::fprintf(stderr, "rank %d lanes to %d: %s; %s\n", rank, 1 - rank, lanes.c_str(), w.describe_transports().c_str());
    CHILD_CHECK(lanes.find("memory") != std::string::npos);
    CHILD_CHECK(lanes.find("tcp") == std::string::npos);
    auto ch = world_channel(w);
    ch->send(1 - rank, nullptr, 0, 6);
    ch->recv(1 - rank, nullptr, 0, 6);
    w.close(Deadline::after_ms(5000));
    return 0;
  });
  assert_all_exit_zero(codes);
}

// PSTATE_SOCKET_IFNAME becomes UCX_NET_DEVICES: "lo" keeps only tcp/lo; an unknown name leaves
// no network transport (a WARN says so) but the worker still works on this host.
void test_socket_ifname_limits_network_devices(void **) {
  UcxWorker lo(test_options(0, 1));
  for (const auto &r : lo.transport_resources())
    if (r.rfind("tcp/", 0) == 0) assert_string_equal(r.c_str(), "tcp/lo");
  // The rule has NCCL_SOCKET_IFNAME's syntax: "^lo" is every interface but lo (where the host has
  // another one; a container with only lo has nothing left, and that is refused below).
  auto o = test_options(0, 1);
  o.socket_ifname = "^lo";
  bool has_other = false;
  for (const auto &i : pstate::ipv4_interfaces()) has_other = has_other || i.name != "lo";
  if (has_other) {
    UcxWorker others(o);
    for (const auto &r : others.transport_resources()) assert_true(r != "tcp/lo");
    auto ch = world_channel(others);
    uint32_t v = 5, got = 0;
    ch->sendrecv(0, &v, 4, 0, &got, 4, 1);
    assert_int_equal(got, 5);
  }
  // A rule that matches no interface here is refused by name, not handed to UCX (which drops a
  // device it cannot open, and the peers of other hosts would be unreachable later).
  o.socket_ifname = "nosuch0";
  bool refused = false;
  try {
    UcxWorker none(o);
  } catch (const pstate::Error &e) {
    refused = e.status() == PSTATE_ERR_INVALID_ARGUMENT && std::strstr(e.what(), "'nosuch0'") != nullptr &&
              std::strstr(e.what(), "lo 127.0.0.1") != nullptr;
  }
  assert_true(refused);
}

// A rank can send to itself (a group of one, or an algorithm step that targets self).
void test_send_to_self_is_delivered(void **) {
  UcxWorker w(test_options(0, 1));
  auto ch = world_channel(w);
  std::vector<uint8_t> out(300000), in(300000);
  fill_pattern(out, 42);
  Channel::Request r[2] = {ch->irecv(0, in.data(), in.size(), 1), ch->isend(0, out.data(), out.size(), 1)};
  ch->wait_all(r, 2);
  assert_true(in == out);
  w.close(Deadline::after_ms(5000));
}

// The 64-bit tag carries group id, source world rank and algorithm tag in separate fields.
void test_tag_layout_keeps_fields_apart(void **) {
  using namespace pstate::ucx;
  uint64_t t = make_tag(kMaxGroupId, kMaxWorldSize - 1, 0xFFFFFFFFu);
  assert_true(t == ~uint64_t{0});
  t = make_tag(5, 1000, 42);
  assert_int_equal(tag_group(t), 5);
  assert_int_equal(tag_source(t), 1000);
  assert_int_equal(tag_algo(t), 42);
  assert_true(make_tag(1, 2, 3) != make_tag(2, 1, 3));
  assert_int_equal(status_of([] { check_tag_fields(4096, 0); }), PSTATE_ERR_INVALID_ARGUMENT);
  assert_int_equal(status_of([] { check_tag_fields(1, kMaxWorldSize); }), PSTATE_ERR_INVALID_ARGUMENT);
}

// A peer entry survives encoding; garbage or truncation is MISMATCH, never a crash.
void test_peer_entry_round_trips_and_rejects_garbage(void **) {
  PeerEntry e{{1, 2, 3, 250}, 123456789012345, "host-a"};
  auto bytes = pstate::encode_peer_entry(e);
  PeerEntry d = pstate::decode_peer_entry(bytes);
  assert_true(d.address == e.address && d.pid == e.pid && d.host_id == e.host_id);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    std::vector<uint8_t> part(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut));
    assert_int_equal(status_of([&] { pstate::decode_peer_entry(part); }), PSTATE_ERR_MISMATCH);
  }
  bytes.push_back(0);
  assert_int_equal(status_of([&] { pstate::decode_peer_entry(bytes); }), PSTATE_ERR_MISMATCH);
  std::vector<uint8_t> huge = {'P', 'S', 'U', '1', 0xFF, 0xFF, 0xFF, 0xFF};
  assert_int_equal(status_of([&] { pstate::decode_peer_entry(huge); }), PSTATE_ERR_MISMATCH);
}

// Bad channel arguments are refused with INVALID_ARGUMENT naming the problem.
void test_channel_rejects_bad_groups(void **) {
  UcxWorker w(test_options(1, 4));
  auto bad = [&](std::vector<int> ranks, int me, uint32_t gid) {
    return status_of([&] { UcxChannel c(w, ranks, me, gid, "bad"); });
  };
  assert_int_equal(bad({0, 1}, 1, 4096), PSTATE_ERR_INVALID_ARGUMENT);  // group id too large
  assert_int_equal(bad({0, 1}, 0, 1), PSTATE_ERR_INVALID_ARGUMENT);     // index 0 is rank 0, not us
  assert_int_equal(bad({1, 1}, 0, 1), PSTATE_ERR_INVALID_ARGUMENT);     // duplicate
  assert_int_equal(bad({1, 4}, 0, 1), PSTATE_ERR_INVALID_ARGUMENT);     // outside the world
  assert_int_equal(bad({}, 0, 1), PSTATE_ERR_INVALID_ARGUMENT);
  UcxChannel ok(w, {3, 1}, 1, 7, "ok");
  assert_int_equal(status_of([&] { ok.isend(2, nullptr, 0, 0); }), PSTATE_ERR_INVALID_ARGUMENT);
  w.close(Deadline::after_ms(1000));
}

}  // namespace

int main() {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tag_layout_keeps_fields_apart),
      cmocka_unit_test(test_peer_entry_round_trips_and_rejects_garbage),
      cmocka_unit_test(test_channel_rejects_bad_groups),
      cmocka_unit_test(test_send_to_self_is_delivered),
      cmocka_unit_test(test_socket_ifname_limits_network_devices),
      cmocka_unit_test(test_same_host_endpoint_uses_shared_memory),
      cmocka_unit_test(test_pingpong_sizes_0_to_64MiB_arrive_intact),
      cmocka_unit_test(test_many_messages_same_tag_arrive_in_order),
      cmocka_unit_test(test_any_size_receive_gets_unknown_lengths_in_order),
      cmocka_unit_test(test_message_of_other_length_is_mismatch),
      cmocka_unit_test(test_groups_with_same_tags_do_not_steal_messages),
  };
  if (const char *only = std::getenv("PSTATE_TEST_FILTER")) cmocka_set_test_filter(only);  // e.g. "*threads*"
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
