// test_op_descriptor.cpp — the 32-bit call codes the shared-memory agreement compares
// (src/common/op_descriptor.hpp): two descriptors get the same code exactly when they are the
// same call (for counts below kCodedCountLarge and roots up to kMaxCodedRoot), every field comes
// back out of the code (every kind up to kReduceScatterV, the 18th of the 32 the code holds), and
// larger counts are flagged for the full comparison. The v-collectives' counts hash tells arrays
// with the same total apart, and descriptions name it.
#include "common/op_descriptor.hpp"

#include <cstdio>
#include <set>
#include <tuple>

// cmocka last: its macros (fail, skip, ...) would clash with names in the C++ headers.
#include <cstdarg>
#include <csetjmp>
#include <cstddef>
extern "C" {
#include <cmocka.h>
}

using namespace pstate;

namespace {

void test_codes_of_different_calls_differ_and_unpack_to_their_fields(void **) {
  const int kinds[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14, 15, 16, 17, 18};  // 18: kReduceScatterV, the last
  const uint64_t counts[] = {0, 1, 2, 4, 8, 255, 256, 2047, 2048, 4032, 4094};
  const int roots[] = {-1, 0, 1, 2, 127, 254};  // kMaxCodedRoot = 254
  std::set<uint32_t> seen;
  size_t made = 0;
  for (int kind : kinds)
    for (int dtype = -1; dtype < PSTATE_DTYPE_COUNT; ++dtype)
      for (int op = -1; op < PSTATE_REDUCE_OP_COUNT; ++op)
        for (uint64_t count : counts)
          for (int root : roots) {
            const OpDescriptor d = make_op(static_cast<OpKind>(kind), count, dtype, op, root);
            const uint32_t code = pack_call_code(d);
            seen.insert(code);
            ++made;
            const OpDescriptor back = unpack_call_code(code);
            assert_int_equal(back.op, kind);
            assert_int_equal(back.dtype, dtype);
            assert_int_equal(back.reduce_op, op);
            assert_int_equal(back.root, root);
            assert_int_equal(back.count, count);
          }
  assert_int_equal(seen.size(), made);  // no two different calls share a code
}

void test_large_counts_are_flagged_for_the_full_comparison(void **) {
  for (uint64_t count : {uint64_t{kCodedCountLarge}, uint64_t{4096}, uint64_t{65536}, uint64_t{1} << 40}) {
    const OpDescriptor d = make_op(OpKind::kAllGather, count, PSTATE_INT32);
    assert_int_equal(unpack_call_code(pack_call_code(d)).count, kCodedCountLarge);
  }
  // Below the flag, N and 2N differ (the matrix's count disagreement).
  assert_int_not_equal(pack_call_code(make_op(OpKind::kAllReduce, 8, PSTATE_FLOAT32, PSTATE_SUM)),
                       pack_call_code(make_op(OpKind::kAllReduce, 16, PSTATE_FLOAT32, PSTATE_SUM)));
}

void test_descriptions_name_every_field_that_applies(void **) {
  assert_string_equal(describe_op(make_op(OpKind::kAllReduce, 4, PSTATE_FLOAT32, PSTATE_SUM)).c_str(),
                      "all_reduce count 4 float32 sum");
  assert_string_equal(describe_op(make_op(OpKind::kBroadcast, 8, PSTATE_INT64, -1, 1)).c_str(),
                      "broadcast count 8 int64 root 1");
  OpDescriptor f = make_op(OpKind::kFinalize, 0);
  f.seq = 17;
  assert_string_equal(describe_op(f, true).c_str(), "pstate_finalize #17");
  assert_string_equal(describe_op(make_op(OpKind::kBroadcastObject, 0, -1, -1, 0)).c_str(), "broadcast_object root 0");
  assert_string_equal(describe_op(make_op(OpKind::kReduce, 5, PSTATE_BFLOAT16, PSTATE_MAX, 2)).c_str(),
                      "reduce count 5 bfloat16 max root 2");
  assert_string_equal(describe_op(make_op(OpKind::kScatter, 9, PSTATE_INT8, -1, 0)).c_str(), "scatter count 9 int8 root 0");
}

void test_counts_hash_tells_arrays_with_the_same_total_apart(void **) {
  const size_t a[3] = {1, 2, 3}, b[3] = {3, 2, 1}, c[3] = {1, 2, 3}, d[4] = {1, 2, 3, 0}, zeros[3] = {0, 0, 0};
  assert_int_equal(counts_hash(a, 3), counts_hash(c, 3));
  assert_int_not_equal(counts_hash(a, 3), counts_hash(b, 3));
  assert_int_not_equal(counts_hash(a, 3), counts_hash(d, 4));  // a trailing empty part is another array
  assert_int_not_equal(counts_hash(zeros, 3), 0u);             // never 0: 0 means "no hash"
  const OpDescriptor x = make_v_op(OpKind::kAllGatherV, a, 3, 6, PSTATE_INT32);
  const OpDescriptor y = make_v_op(OpKind::kAllGatherV, b, 3, 6, PSTATE_INT32);
  assert_int_equal(pack_call_code(x), pack_call_code(y));  // the code cannot see it: detail carries it
  assert_int_not_equal(x.detail, y.detail);
  assert_true(carries_counts_hash(x.op));
  assert_false(carries_counts_hash(static_cast<uint32_t>(OpKind::kAllGather)));
  char want[80];
  std::snprintf(want, sizeof want, "all_gatherv total 6 int32 counts %08x", x.detail);
  assert_string_equal(describe_op(x).c_str(), want);
  const OpDescriptor z = make_v_op(OpKind::kReduceScatterV, a, 3, 6, PSTATE_FLOAT32, PSTATE_SUM);
  std::snprintf(want, sizeof want, "reduce_scatterv total 6 float32 sum counts %08x", z.detail);
  assert_string_equal(describe_op(z).c_str(), want);
}

}  // namespace

int main() {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_codes_of_different_calls_differ_and_unpack_to_their_fields),
      cmocka_unit_test(test_large_counts_are_flagged_for_the_full_comparison),
      cmocka_unit_test(test_descriptions_name_every_field_that_applies),
      cmocka_unit_test(test_counts_hash_tells_arrays_with_the_same_total_apart),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
