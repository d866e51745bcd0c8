// test_struct_io.cpp — the reading and writing of the caller's extensible structs
// (src/common/struct_io.hpp, pstate.h "Conventions"): the 1.0 sizes are the ends of the 1.0
// fields (spelled here by hand, so a field appended later cannot move them unnoticed); a struct
// below its 1.0 size is refused, one at it (the tensor's, 4 bytes short of sizeof) is read
// whole; a larger caller's zero tail is
// accepted and a nonzero byte is refused at its offset; an out struct gets exactly the caller's
// bytes; an array is walked by its elements' struct_size, and an element of another size, a
// nonzero tail in any element, or a stride that overflows is refused naming it.
#include "common/struct_io.hpp"

#include <cstring>
#include <string>

// cmocka last: its macros (fail, skip, ...) would clash with names in the C++ headers.
#include <cstdarg>
#include <csetjmp>
#include <cstddef>
extern "C" {
#include <cmocka.h>
}

using namespace pstate;

namespace {

template <typename F>
std::string refusal(F &&f) {
  try {
    f();
  } catch (const Error &e) {
    assert_int_equal(e.status(), PSTATE_ERR_INVALID_ARGUMENT);
    return e.what();
  }
  fail_msg("not refused");
  return {};
}

void test_oldest_sizes_are_the_ends_of_the_1_0_fields(void **) {
  assert_int_equal(StructTraits<pstate_init_params_t>::kOldestSize,
                   offsetof(pstate_init_params_t, socket_ifname) + sizeof(const char *));
  assert_int_equal(StructTraits<pstate_parallel_config_t>::kOldestSize, sizeof(size_t) + 8 * sizeof(int));
  assert_int_equal(StructTraits<pstate_group_info_t>::kOldestSize,
                   offsetof(pstate_group_info_t, name) + PSTATE_GROUP_NAME_MAX);
  assert_int_equal(StructTraits<pstate_p2p_op_t>::kOldestSize, offsetof(pstate_p2p_op_t, peer) + sizeof(int));
  assert_int_equal(StructTraits<pstate_tensor_t>::kOldestSize,
                   offsetof(pstate_tensor_t, device) + sizeof(pstate_device_t));
  static_assert(sizeof(void *) != 8 || StructTraits<pstate_tensor_t>::kOldestSize == 44, "LP64: 44 of 48 bytes");
}

void test_a_struct_below_its_1_0_size_is_refused_and_one_at_it_is_read(void **) {
  pstate_p2p_op_t op = PSTATE_P2P_OP_INIT;
  op.count = 7;
  op.struct_size = offsetof(pstate_p2p_op_t, peer);  // lacks a 1.0 field
  const std::string why = refusal([&] { read_struct(&op, "op"); });
  assert_non_null(std::strstr(why.c_str(), "PSTATE_P2P_OP_INIT"));
  // The tensor's 1.0 size (44 on LP64) is below its sizeof (48, tail padding): accepted, the
  // fields read, struct_size the library's.
  pstate_tensor_t t = PSTATE_TENSOR_INIT;
  t.ndim = 2;
  t.device = PSTATE_DEVICE_CUDA;
  t.struct_size = StructTraits<pstate_tensor_t>::kOldestSize;
  const pstate_tensor_t got = read_struct(&t, "tensor");
  assert_int_equal(got.ndim, 2);
  assert_int_equal(got.device, PSTATE_DEVICE_CUDA);
  assert_int_equal(got.struct_size, sizeof(pstate_tensor_t));
}

struct Newer {
  pstate_parallel_config_t c;
  uint32_t added[3];
};

void test_a_larger_struct_needs_a_zero_tail(void **) {
  Newer n;
  std::memset(&n, 0, sizeof n);
  n.c = PSTATE_PARALLEL_CONFIG_INIT;
  n.c.struct_size = sizeof n;
  n.c.tensor_parallel_size = 3;
  assert_int_equal(read_struct(&n.c, "cfg").tensor_parallel_size, 3);
  n.added[2] = 0x100;  // little-endian: the second byte of added[2] is the first nonzero one
  const std::string why = refusal([&] { read_struct(&n.c, "cfg"); });
  const std::string at = "offset " + std::to_string(offsetof(Newer, added) + 2 * sizeof(uint32_t) + 1);
  assert_non_null(std::strstr(why.c_str(), at.c_str()));
  assert_non_null(std::strstr(why.c_str(), "pstate_parallel_config_t"));
  n.c.struct_size = kMaxStructSize + 1;  // never read that far
  assert_non_null(std::strstr(refusal([&] { read_struct(&n.c, "cfg"); }).c_str(), "that large"));
}

void test_an_out_struct_gets_exactly_the_callers_bytes(void **) {
  struct {
    pstate_group_info_t info;
    unsigned char tail[8];
  } out;
  std::memset(&out, 0xee, sizeof out);
  out.info.struct_size = sizeof out;
  pstate_group_info_t v = PSTATE_GROUP_INFO_INIT;
  v.world_size = 5;
  write_struct(&out.info, v, "out");
  assert_int_equal(out.info.world_size, 5);
  assert_int_equal(out.info.struct_size, sizeof out);
  for (unsigned char b : out.tail) assert_int_equal(b, 0xee);
  out.info.struct_size = 8;
  out.info.world_size = 9;
  refusal([&] { write_struct(&out.info, v, "out"); });
  assert_int_equal(out.info.world_size, 9);
}

struct WideOp {
  pstate_p2p_op_t op;
  uint64_t added;
};

void test_an_array_is_walked_by_its_elements_struct_size(void **) {
  WideOp ops[3];
  std::memset(ops, 0, sizeof ops);
  for (int i = 0; i < 3; ++i) {
    ops[i].op = PSTATE_P2P_OP_INIT;
    ops[i].op.struct_size = sizeof(WideOp);
    ops[i].op.peer = 10 + i;
  }
  const auto got = read_struct_array(&ops[0].op, 3, "ops");
  assert_int_equal(got.size(), 3);
  for (int i = 0; i < 3; ++i) assert_int_equal(got[static_cast<size_t>(i)].peer, 10 + i);
  ops[1].op.struct_size = sizeof(pstate_p2p_op_t);
  assert_non_null(std::strstr(refusal([&] { read_struct_array(&ops[0].op, 3, "ops"); }).c_str(), "ops[1].struct_size"));
  ops[1].op.struct_size = sizeof(WideOp);
  ops[2].added = 1;
  assert_non_null(std::strstr(refusal([&] { read_struct_array(&ops[0].op, 3, "ops"); }).c_str(), "ops[2]"));
  ops[2].added = 0;
  assert_true(read_struct_array(static_cast<const pstate_p2p_op_t *>(nullptr), 0, "ops").empty());
  refusal([&] { read_struct_array(static_cast<const pstate_p2p_op_t *>(nullptr), 1, "ops"); });
  // a count whose span overflows is refused before any element is read past the first
  assert_non_null(std::strstr(refusal([&] { read_struct_array(&ops[0].op, SIZE_MAX / 8, "ops"); }).c_str(), "overflow"));
}

}  // namespace

int main() {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_oldest_sizes_are_the_ends_of_the_1_0_fields),
      cmocka_unit_test(test_a_struct_below_its_1_0_size_is_refused_and_one_at_it_is_read),
      cmocka_unit_test(test_a_larger_struct_needs_a_zero_tail),
      cmocka_unit_test(test_an_out_struct_gets_exactly_the_callers_bytes),
      cmocka_unit_test(test_an_array_is_walked_by_its_elements_struct_size),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
