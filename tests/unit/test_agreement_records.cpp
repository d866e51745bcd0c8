// test_agreement_records.cpp — the agreement exchange's records (src/group/agreement_exchange.hpp)
// over the thread harness: every group size 1..9, ranks whose records carry payloads of different
// lengths (folded calls of different counts), bare 32-byte ones, a broadcast (only the root's
// record carries data), every rank's table checked against what each rank sent (the same table
// everywhere); a rank that sends messages of another format (garbage of odd lengths) instead of
// records: every other rank's table marks it unreadable (kUnparsed) and nobody hangs or reads past
// a buffer; and parse_records on its own: exact, short, trailing bytes, payload past the cap.
#include "common/op_descriptor.hpp"
#include "coll/coll_util.hpp"
#include "group/agreement_exchange.hpp"
#include "thread_channel.hpp"

#include <cstring>
#include <string>
#include <vector>

// cmocka last: its macros (fail, skip, ...) would clash with names in the C++ headers.
#include <cstdarg>
#include <csetjmp>
#include <cstddef>
extern "C" {
#include <cmocka.h>
}

using pstate::OpDescriptor;
using pstate::OpKind;
namespace agree = pstate::agree;

namespace {

constexpr uint32_t kTagBase = 0x0005ff00;

uint8_t byte_of(int rank, size_t i) { return static_cast<uint8_t>(rank * 37 + static_cast<int>(i) * 11 + 1); }

// The descriptor rank r sends in case `variant`, and its payload length.
OpDescriptor desc_of(int r, int p, int variant) {
  OpDescriptor d{static_cast<uint32_t>(OpKind::kAllReduce), 7, 4, PSTATE_FLOAT32, PSTATE_SUM, -1, 0};
  const size_t cap = agree::fold_cap(p);
  switch (variant) {
    case 0: d.detail = static_cast<uint32_t>(cap); break;                                  // all folded, T bytes
    case 1: d.detail = r % 3 == 0 ? 0 : static_cast<uint32_t>((r * 13) % (cap + 1)); break;  // mixed lengths
    case 2:                                                                                // broadcast from p-1
      d.op = static_cast<uint32_t>(OpKind::kBroadcast);
      d.root = p - 1;
      d.detail = cap == 0 ? 0 : static_cast<uint32_t>(cap / 2 + 1);
      break;
    default: break;  // bare records
  }
  return d;
}

void exchange_case(int p, int variant) {
  std::vector<OpDescriptor> sent(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) sent[static_cast<size_t>(r)] = desc_of(r, p, variant);
  std::vector<std::string> problems(static_cast<size_t>(p));
  std::string err = ptest::run_ranks(p, [&](pstate::Channel &ch) {
    const int me = ch.rank();
    const OpDescriptor mine = sent[static_cast<size_t>(me)];
    std::vector<uint8_t> payload(agree::payload_bytes(mine, me));
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = byte_of(me, i);
    agree::Table t;
    for (int twice = 0; twice < 2; ++twice) {  // the table's buffer is reused
      agree::exchange(ch, mine, payload.data(), kTagBase + static_cast<uint32_t>(twice) * 0x100, &t);
      for (int r = 0; r < p; ++r) {
        const OpDescriptor &want = sent[static_cast<size_t>(r)];
        if (std::memcmp(&t.desc[static_cast<size_t>(r)], &want, sizeof want) != 0)
          problems[static_cast<size_t>(me)] += pstate::cat(" desc of ", r, " differs;");
        const size_t n = agree::payload_bytes(want, r);
        for (size_t i = 0; i < n; ++i)
          if (t.payload(r)[i] != byte_of(r, i)) {
            problems[static_cast<size_t>(me)] += pstate::cat(" payload of ", r, " byte ", i, ";");
            break;
          }
      }
    }
  });
  assert_true(err.empty() || (std::fprintf(stderr, "p=%d variant %d: %s\n", p, variant, err.c_str()), false));
  for (int r = 0; r < p; ++r)
    if (!problems[static_cast<size_t>(r)].empty()) {
      std::fprintf(stderr, "p=%d variant %d rank %d:%s\n", p, variant, r, problems[static_cast<size_t>(r)].c_str());
      fail();
    }
}

void test_exchange_every_size(void **) {
  for (int p = 1; p <= 9; ++p)
    for (int variant = 0; variant < 4; ++variant) exchange_case(p, variant);
}

// Rank `odd` runs Bruck's message pattern with garbage of odd lengths; the others exchange.
void garbage_case(int p, int odd) {
  std::vector<int> unparsed(static_cast<size_t>(p), 0), wrong(static_cast<size_t>(p), 0);
  std::string err = ptest::run_ranks(p, [&](pstate::Channel &ch) {
    const int me = ch.rank();
    if (me == odd) {
      std::vector<uint8_t> junk(45, 0xab), in;
      uint32_t round = 0;
      for (int d = 1; d < p; d *= 2, ++round) {
        const uint32_t tag = pstate::coll::detail::step_tag(kTagBase, round);
        pstate::Channel::Request q[2] = {ch.irecv_any_size(pstate::coll::detail::mod(me + d, p), &in, tag),
                                         ch.isend(pstate::coll::detail::mod(me - d, p), junk.data(),
                                                  junk.size() - static_cast<size_t>(d), tag)};
        ch.wait_all(q, 2);
      }
      return;
    }
    OpDescriptor mine = desc_of(me, p, 1);
    std::vector<uint8_t> payload(agree::payload_bytes(mine, me), 1);
    agree::Table t;
    agree::exchange(ch, mine, payload.data(), kTagBase, &t);
    unparsed[static_cast<size_t>(me)] = t.desc[static_cast<size_t>(odd)].op == agree::kUnparsed;
    for (int r = 0; r < p; ++r) {
      const OpDescriptor &d = t.desc[static_cast<size_t>(r)], want = desc_of(r, p, 1);
      if (d.op != agree::kUnparsed && std::memcmp(&d, &want, sizeof d) != 0) wrong[static_cast<size_t>(me)] = 1;
    }
  });
  assert_true(err.empty() || (std::fprintf(stderr, "p=%d odd %d: %s\n", p, odd, err.c_str()), false));
  for (int r = 0; r < p; ++r) {
    if (r == odd) continue;
    if (!unparsed[static_cast<size_t>(r)] || wrong[static_cast<size_t>(r)])
      std::fprintf(stderr, "p=%d odd %d: rank %d unparsed=%d wrong=%d\n", p, odd, r, unparsed[static_cast<size_t>(r)],
                   wrong[static_cast<size_t>(r)]);
    assert_true(unparsed[static_cast<size_t>(r)]);
    assert_false(wrong[static_cast<size_t>(r)]);
  }
}

void test_exchange_garbage_peer(void **) {
  for (int p = 2; p <= 7; ++p)
    for (int odd = 0; odd < p; odd += 2) garbage_case(p, odd);
}

void test_parse_records(void **) {
  const int p = 4;
  const size_t cap = agree::fold_cap(p);
  OpDescriptor a = pstate::make_op(OpKind::kAllReduce, 3, PSTATE_INT8, PSTATE_SUM), b = a;
  a.detail = 3;  // padded to 8
  b.detail = 0;
  std::vector<uint8_t> msg(agree::record_bytes(3) + agree::record_bytes(0), 0);
  std::memcpy(msg.data(), &a, sizeof a);
  std::memcpy(msg.data() + agree::record_bytes(3), &b, sizeof b);
  OpDescriptor descs[2];
  size_t at[2];
  assert_true(agree::parse_records(msg.data(), msg.size(), 3, 2, p, cap, descs, at));
  assert_int_equal(at[0], sizeof(OpDescriptor));
  assert_int_equal(at[1], agree::record_bytes(3) + sizeof(OpDescriptor));
  assert_int_equal(descs[0].detail, 3);
  assert_false(agree::parse_records(msg.data(), msg.size() - 1, 3, 2, p, cap, descs, at));  // short
  msg.push_back(0);
  assert_false(agree::parse_records(msg.data(), msg.size(), 3, 2, p, cap, descs, at));  // trailing
  a.detail = static_cast<uint32_t>(cap + 8);  // more than any legal record carries
  std::vector<uint8_t> big(agree::record_bytes(cap + 8), 0);
  std::memcpy(big.data(), &a, sizeof a);
  assert_false(agree::parse_records(big.data(), big.size(), 0, 1, p, cap, descs, at));
  // a v-collective's detail is its hash, never a length
  OpDescriptor v = pstate::make_op(OpKind::kAllGatherV, 9, PSTATE_INT8);
  v.detail = 0xdeadbeef;
  std::memcpy(big.data(), &v, sizeof v);
  assert_true(agree::parse_records(big.data(), sizeof v, 0, 1, p, cap, descs, at));
  // the broadcast's data rides in the root's record only
  OpDescriptor bc = pstate::make_op(OpKind::kBroadcast, 16, PSTATE_UINT8, -1, 2);
  bc.detail = 16;
  assert_int_equal(agree::payload_bytes(bc, 2), 16);
  assert_int_equal(agree::payload_bytes(bc, 1), 0);
  assert_int_equal(agree::fold_cap(1), 0);
  assert_int_equal(agree::fold_cap(2), agree::kFoldMax);
}

}  // namespace

int main() {
  const CMUnitTest tests[] = {
      cmocka_unit_test(test_exchange_every_size),
      cmocka_unit_test(test_exchange_garbage_peer),
      cmocka_unit_test(test_parse_records),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
