// test_coll_object.cpp — the object operations (variable-length bytes, no size agreed in
// advance) over the thread harness: broadcast_object from every root for sizes {0, 1, 1000,
// 100003}, all_gather_object with sizes differing per rank (zeros included), send/recv_object
// ordering, and argument checks.
#include "coll/algorithms.hpp"
#include "move_cases.hpp"
#include "thread_channel.hpp"

#include <string>
#include <vector>

// cmocka last: its macros (fail, skip, ...) would clash with names in the C++ headers.
#include <cstdarg>
#include <csetjmp>
#include <cstddef>
extern "C" {
#include <cmocka.h>
}

using namespace ptest;
using pstate::Channel;

namespace {
constexpr uint32_t kTagBase = 0x00090000;
}

static void test_broadcast_object_delivers_root_bytes_of_any_size_from_every_root(void **) {
  for (int p = 1; p <= kMaxGroup; ++p)
    for (int root = 0; root < p; ++root)
      for (size_t size : {size_t{0}, size_t{1}, size_t{1000}, size_t{100003}}) {
        const std::vector<uint8_t> object = pattern(root, 7, size);
        // Outputs start non-empty and of the wrong size: the operation must replace them.
        std::vector<std::vector<uint8_t>> out(static_cast<size_t>(p), std::vector<uint8_t>(13, 0xEE));
        std::string err = run_ranks(p, [&](Channel &ch) {
          const int r = ch.rank();
          // The root passes an output on odd group sizes only: both forms are legal.
          std::vector<uint8_t> *o = (r == root && p % 2 == 0) ? nullptr : &out[static_cast<size_t>(r)];
          pstate::coll::broadcast_object(ch, r == root ? object.data() : nullptr, r == root ? size : 0, root, o, kTagBase);
        });
        const std::string what = "broadcast_object P=" + std::to_string(p) + " root=" + std::to_string(root) +
                                  " size=" + std::to_string(size);
        if (!err.empty()) fail_msg("%s: %s", what.c_str(), err.c_str());
        for (int r = 0; r < p; ++r) {
          if (r == root && p % 2 == 0) continue;
          if (out[static_cast<size_t>(r)] != object) fail_msg("%s: rank %d got different bytes", what.c_str(), r);
        }
      }
}

static void test_all_gather_object_concatenates_objects_of_different_sizes_in_rank_order(void **) {
  auto size_of = [](int r, int variant) -> size_t {
    switch (variant) {
      case 0: return static_cast<size_t>(r) * 1000 + 3;       // rank 0 small, others growing
      case 1: return r % 3 == 1 ? 0 : static_cast<size_t>(r + 1) * 17;  // some empty
      default: return 0;                                     // all empty
    }
  };
  for (int p = 1; p <= kMaxGroup; ++p)
    for (int variant = 0; variant < 3; ++variant) {
      std::vector<std::vector<uint8_t>> objects(static_cast<size_t>(p)), out(static_cast<size_t>(p));
      std::vector<std::vector<size_t>> sizes(static_cast<size_t>(p));
      std::vector<uint8_t> want;
      for (int r = 0; r < p; ++r) {
        objects[static_cast<size_t>(r)] = pattern(r, 1, size_of(r, variant));
        want.insert(want.end(), objects[static_cast<size_t>(r)].begin(), objects[static_cast<size_t>(r)].end());
      }
      std::string err = run_ranks(p, [&](Channel &ch) {
        const size_t r = static_cast<size_t>(ch.rank());
        pstate::coll::all_gather_object(ch, objects[r].data(), objects[r].size(), &out[r], &sizes[r], kTagBase);
      });
      if (!err.empty()) fail_msg("P=%d variant %d: %s", p, variant, err.c_str());
      for (int r = 0; r < p; ++r) {
        if (out[static_cast<size_t>(r)] != want) fail_msg("P=%d variant %d: rank %d concatenation differs", p, variant, r);
        assert_int_equal(sizes[static_cast<size_t>(r)].size(), p);
        for (int j = 0; j < p; ++j) assert_int_equal(sizes[static_cast<size_t>(r)][static_cast<size_t>(j)], size_of(j, variant));
      }
    }
}

static void test_recv_object_learns_sizes_and_keeps_send_order(void **) {
  const size_t kSizes[] = {5, 0, 70000, 1, 300};
  std::vector<std::vector<uint8_t>> got;
  std::string err = run_ranks(3, [&](Channel &ch) {
    if (ch.rank() == 2) {
      for (size_t k = 0; k < 5; ++k) {
        auto object = pattern(2, static_cast<int>(k), kSizes[k]);
        pstate::coll::send_object(ch, object.data(), object.size(), 0, 0x77);
      }
    } else if (ch.rank() == 0) {
      for (size_t k = 0; k < 5; ++k) {
        std::vector<uint8_t> object(9, 0xEE);
        pstate::coll::recv_object(ch, 2, &object, 0x77);
        got.push_back(object);
      }
    }
  });
  if (!err.empty()) fail_msg("%s", err.c_str());
  assert_int_equal(got.size(), 5);
  for (size_t k = 0; k < 5; ++k)
    if (got[k] != pattern(2, static_cast<int>(k), kSizes[k])) fail_msg("object %zu differs", k);
}

static void test_object_calls_refuse_bad_peers_and_missing_outputs(void **) {
  std::string err = run_ranks(2, [&](Channel &ch) {
    int refused = 0;
    auto expect_invalid = [&](auto call) {
      try {
        call();
      } catch (const pstate::Error &e) {
        if (e.status() == PSTATE_ERR_INVALID_ARGUMENT) ++refused;
      }
    };
    std::vector<uint8_t> v;
    const uint8_t byte = 1;
    expect_invalid([&] { pstate::coll::send_object(ch, &byte, 1, ch.rank(), 1); });  // to itself
    expect_invalid([&] { pstate::coll::send_object(ch, &byte, 1, 2, 1); });          // outside the group
    expect_invalid([&] { pstate::coll::recv_object(ch, -1, &v, 1); });
    expect_invalid([&] { pstate::coll::recv_object(ch, 1 - ch.rank(), nullptr, 1); });
    expect_invalid([&] { pstate::coll::broadcast_object(ch, &byte, 1, 5, &v, kTagBase); });
    expect_invalid([&] { pstate::coll::all_gather_object(ch, &byte, 1, nullptr, nullptr, kTagBase); });
    if (refused != 6) pstate::throw_error(PSTATE_ERR_INTERNAL, 6 - refused, " bad calls were accepted");
  });
  if (!err.empty()) fail_msg("%s", err.c_str());
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_broadcast_object_delivers_root_bytes_of_any_size_from_every_root),
      cmocka_unit_test(test_all_gather_object_concatenates_objects_of_different_sizes_in_rank_order),
      cmocka_unit_test(test_recv_object_learns_sizes_and_keeps_send_order),
      cmocka_unit_test(test_object_calls_refuse_bad_peers_and_missing_outputs),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
