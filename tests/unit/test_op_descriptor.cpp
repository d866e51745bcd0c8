// test_op_descriptor.cpp — the 32-bit call codes the shared-memory agreement compares
// (src/common/op_descriptor.hpp): two descriptors get the same code exactly when they are the
// same call (for counts below kCodedCountLarge and roots up to kMaxCodedRoot), every field comes
// back out of the code (every kind up to kScatter, the 16th), and larger counts are flagged for
// the full comparison.
#include "common/op_descriptor.hpp"

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
  const int kinds[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14, 15, 16};  // 16: kScatter, the last
  const uint64_t counts[] = {0, 1, 2, 4, 8, 255, 256, 2047, 2048, 4032, 4094};
  const int roots[] = {-1, 0, 1, 2, 255, 510};
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

}  // namespace

int main() {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_codes_of_different_calls_differ_and_unpack_to_their_fields),
      cmocka_unit_test(test_large_counts_are_flagged_for_the_full_comparison),
      cmocka_unit_test(test_descriptions_name_every_field_that_applies),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
