// test_coll_select.cpp — the algorithm selector (src/coll/select.hpp): the size rules at and
// around each named threshold, the names it reports, the PSTATE_ALGO_* overrides (through a
// lookup and through the real environment), and that an unknown override is refused by name.
#include "coll/select.hpp"
#include "common/error.hpp"

#include <cstdlib>
#include <map>
#include <string>

// cmocka last: its macros (fail, skip, ...) would clash with names in the C++ headers.
#include <cstdarg>
#include <csetjmp>
#include <cstddef>
extern "C" {
#include <cmocka.h>
}

using namespace pstate::coll;

namespace {

AlgorithmSelector with(std::map<std::string, std::string> overrides) {
  return AlgorithmSelector([overrides = std::move(overrides)](const char *name) -> const char * {
    static thread_local std::string value;
    auto it = overrides.find(name);
    if (it == overrides.end()) return nullptr;
    value = it->second;
    return value.c_str();
  });
}

}  // namespace

static void test_allreduce_uses_recursive_doubling_up_to_threshold_then_ring(void **) {
  const AlgorithmSelector s = with({});
  auto at = s.allreduce(8, kAllreduceRingMinBytes / 4, kAllreduceRingMinBytes);
  assert_string_equal(at.name, "recursive_doubling");
  assert_ptr_equal(at.fn, &allreduce_recursive_doubling);
  auto above = s.allreduce(8, kAllreduceRingMinBytes / 4 + 1, kAllreduceRingMinBytes + 4);
  assert_string_equal(above.name, "ring");
  assert_ptr_equal(above.fn, &allreduce_ring);
  // Fewer elements than ranks: ring blocks would be mostly empty.
  assert_string_equal(s.allreduce(1 << 20, (1 << 20) - 1, 1 << 24).name, "recursive_doubling");
}

static void test_allgather_uses_bruck_while_the_result_is_small(void **) {
  const AlgorithmSelector s = with({});
  assert_string_equal(s.allgather(4, kAllgatherRingMinBytes / 4).name, "bruck");
  assert_string_equal(s.allgather(4, kAllgatherRingMinBytes / 4 + 1).name, "ring");
  assert_ptr_equal(s.allgather(4, 1).fn, &allgather_bruck);
}

static void test_broadcast_uses_chain_for_large_buffers_on_three_or_more_ranks(void **) {
  const AlgorithmSelector s = with({});
  assert_string_equal(s.broadcast(8, kBroadcastChainMinBytes).name, "binomial");
  assert_string_equal(s.broadcast(8, kBroadcastChainMinBytes + 1).name, "pipelined_chain");
  assert_string_equal(s.broadcast(2, size_t{1} << 30).name, "binomial");
  assert_ptr_equal(s.broadcast(3, size_t{1} << 30).fn, &broadcast_pipelined_chain);
}

static void test_reduce_uses_binomial_up_to_threshold_then_ring(void **) {
  const AlgorithmSelector s = with({});
  auto at = s.reduce(8, kReduceRingMinBytes / 4, kReduceRingMinBytes);
  assert_string_equal(at.name, "binomial");
  assert_ptr_equal(at.fn, &reduce_binomial);
  auto above = s.reduce(8, kReduceRingMinBytes / 4 + 1, kReduceRingMinBytes + 4);
  assert_string_equal(above.name, "ring");
  assert_ptr_equal(above.fn, &reduce_ring);
  // Fewer elements than ranks: ring blocks would be mostly empty.
  assert_string_equal(s.reduce(1 << 20, (1 << 20) - 1, 1 << 24).name, "binomial");
  assert_string_equal(with({{"PSTATE_ALGO_REDUCE", "ring"}}).reduce(2, 1, 4).name, "ring");
  assert_string_equal(with({{"PSTATE_ALGO_REDUCE", "binomial"}}).reduce(8, 1 << 24, 1 << 26).name, "binomial");
}

static void test_single_algorithm_collectives_report_their_names(void **) {
  const AlgorithmSelector s = with({});
  assert_string_equal(s.reduce_scatter(4, 100).name, "ring");
  assert_string_equal(s.gather(4, 100).name, "linear");
  assert_string_equal(s.scatter(4, 100).name, "linear");
  assert_ptr_equal(s.scatter(4, 1 << 30).fn, &scatter_linear);
  assert_string_equal(s.alltoall(4, 100).name, "pairwise");
  assert_string_equal(s.barrier(4).name, "dissemination");
  assert_ptr_equal(s.barrier(4).fn, &barrier_dissemination);
}

static void test_overrides_force_an_algorithm_at_every_size(void **) {
  const AlgorithmSelector s = with({{"PSTATE_ALGO_ALLREDUCE", "ring"},
                                    {"PSTATE_ALGO_ALLGATHER", "ring"},
                                    {"PSTATE_ALGO_BROADCAST", "pipelined_chain"},
                                    {"PSTATE_ALGO_BARRIER", "auto"}});
  assert_string_equal(s.allreduce(2, 1, 4).name, "ring");
  assert_string_equal(s.allgather(2, 1).name, "ring");
  assert_string_equal(s.broadcast(2, 1).name, "pipelined_chain");
  assert_string_equal(s.barrier(2).name, "dissemination");
  const AlgorithmSelector small = with({{"PSTATE_ALGO_ALLREDUCE", "recursive_doubling"}});
  assert_string_equal(small.allreduce(8, 1 << 24, 1 << 26).name, "recursive_doubling");
}

static void test_unknown_override_is_refused_naming_variable_and_choices(void **) {
  try {
    with({{"PSTATE_ALGO_ALLREDUCE", "rign"}});
    fail_msg("a misspelt algorithm was accepted");
  } catch (const pstate::Error &e) {
    assert_int_equal(e.status(), PSTATE_ERR_INVALID_ARGUMENT);
    const std::string msg = e.what();
    assert_true(msg.find("PSTATE_ALGO_ALLREDUCE=rign") != std::string::npos);
    assert_true(msg.find("recursive_doubling") != std::string::npos);
  }
  try {
    with({{"PSTATE_ALGO_REDUCE", "tree"}});
    fail_msg("an unknown reduce algorithm was accepted");
  } catch (const pstate::Error &e) {
    assert_int_equal(e.status(), PSTATE_ERR_INVALID_ARGUMENT);
    assert_true(std::string(e.what()).find("binomial, ring") != std::string::npos);
  }
}

static void test_default_selector_reads_the_environment(void **) {
  setenv("PSTATE_ALGO_ALLGATHER", "ring", 1);
  const AlgorithmSelector s;
  unsetenv("PSTATE_ALGO_ALLGATHER");
  assert_string_equal(s.allgather(2, 1).name, "ring");
  assert_string_equal(AlgorithmSelector().allgather(2, 1).name, "bruck");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_allreduce_uses_recursive_doubling_up_to_threshold_then_ring),
      cmocka_unit_test(test_allgather_uses_bruck_while_the_result_is_small),
      cmocka_unit_test(test_broadcast_uses_chain_for_large_buffers_on_three_or_more_ranks),
      cmocka_unit_test(test_reduce_uses_binomial_up_to_threshold_then_ring),
      cmocka_unit_test(test_single_algorithm_collectives_report_their_names),
      cmocka_unit_test(test_overrides_force_an_algorithm_at_every_size),
      cmocka_unit_test(test_unknown_override_is_refused_naming_variable_and_choices),
      cmocka_unit_test(test_default_selector_reads_the_environment),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
