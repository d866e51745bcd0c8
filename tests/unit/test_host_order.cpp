// test_host_order.cpp — host awareness (src/group/host_order.hpp, host_identity.hpp): renumbering
// ranks host by host for PSTATE_ORDER_RANKS_BY_HOST, counting a group's hosts and describing them
// for the TP-across-hosts warning (pure functions, references written out by hand), and this
// process's own host identity (reference read from the system with other calls than the code's).
#include "group/host_identity.hpp"
#include "group/host_order.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

// cmocka last: its macros (fail, skip, ...) would clash with names in the C++ headers.
#include <cstdarg>
#include <csetjmp>
#include <cstddef>
extern "C" {
#include <cmocka.h>
}

using namespace pstate;

namespace {

const std::string kA = "a|boot|net:1|pid:9", kB = "b|boot|net:2|pid:9", kC = "c|boot|net:3|pid:9";

void test_interleaved_launcher_ranks_are_renumbered_host_by_host(void **) {
  // srun cyclic on 2 hosts: launcher ranks 0,2,4,6 on a and 1,3,5,7 on b.
  std::vector<int> got = ranks_ordered_by_host({kA, kB, kA, kB, kA, kB, kA, kB});
  std::vector<int> want = {0, 4, 1, 5, 2, 6, 3, 7};
  assert_true(got == want);
}

void test_node_major_ranks_keep_their_numbers(void **) {
  std::vector<int> got = ranks_ordered_by_host({kA, kA, kB, kB, kC, kC});
  assert_true(got == std::vector<int>({0, 1, 2, 3, 4, 5}));
}

void test_hosts_come_in_order_of_their_lowest_launcher_rank_and_rank_0_stays_0(void **) {
  // host c first (launcher rank 0), then a (rank 1), then b (rank 3); uneven host sizes.
  std::vector<int> got = ranks_ordered_by_host({kC, kA, kC, kB, kA, kA});
  std::vector<int> want = {0, 2, 1, 5, 3, 4};
  assert_true(got == want);
  assert_int_equal(got[0], 0);
}

void test_hosts_of_a_group_are_counted_and_named_with_their_ranks(void **) {
  std::vector<std::string> hosts = {kA, kB, kA, kB};
  assert_int_equal(count_hosts({0, 2}, hosts), 1);
  assert_int_equal(count_hosts({0, 1, 2, 3}, hosts), 2);
  assert_string_equal(describe_hosts({0, 1, 2, 3}, hosts).c_str(), "ranks 0,2 on a (netns 1); ranks 1,3 on b (netns 2)");
  assert_string_equal(describe_hosts({1, 2}, hosts).c_str(), "rank 1 on b (netns 2); rank 2 on a (netns 1)");
}

void test_the_environment_switch_is_off_unless_set_to_something_other_than_0(void **) {
  unsetenv("PSTATE_ORDER_RANKS_BY_HOST");
  assert_false(order_ranks_by_host_from_env());
  setenv("PSTATE_ORDER_RANKS_BY_HOST", "0", 1);
  assert_false(order_ranks_by_host_from_env());
  setenv("PSTATE_ORDER_RANKS_BY_HOST", "", 1);
  assert_false(order_ranks_by_host_from_env());
  setenv("PSTATE_ORDER_RANKS_BY_HOST", "1", 1);
  assert_true(order_ranks_by_host_from_env());
  unsetenv("PSTATE_ORDER_RANKS_BY_HOST");
}

// The number in a namespace link's target, "pid:[4026531836]" -> "4026531836" (readlink, where
// the code under test uses stat's inode).
std::string namespace_number(const char *link) {
  char target[128] = {0};
  ssize_t n = readlink(link, target, sizeof(target) - 1);
  assert_true(n > 0);
  std::string t(target, static_cast<size_t>(n));
  size_t open = t.find('['), close = t.find(']');
  assert_true(open != std::string::npos && close != std::string::npos && close > open + 1);
  return t.substr(open + 1, close - open - 1);
}

// Ranks are "on the same host" when they share kernel boot, network and pid namespace: the
// identity names all four parts, in its documented form, and is stable within a process.
void test_this_host_identity_names_host_boot_net_and_pid_namespace(void **) {
  char host[256] = {0};
  assert_int_equal(gethostname(host, sizeof(host) - 1), 0);
  std::string boot;
  std::getline(std::ifstream("/proc/sys/kernel/random/boot_id"), boot);
  assert_false(boot.empty());
  std::string net = namespace_number("/proc/self/ns/net"), pid = namespace_number("/proc/self/ns/pid");
  std::string want = std::string(host) + "|" + boot + "|net:" + net + "|pid:" + pid;
  std::string got = this_host_identity();
  assert_string_equal(got.c_str(), want.c_str());
  assert_string_equal(this_host_identity().c_str(), got.c_str());
  assert_string_equal(host_identity_name(got).c_str(), (std::string(host) + " (netns " + net + ")").c_str());
}

}  // namespace

int main() {
  const CMUnitTest tests[] = {
      cmocka_unit_test(test_interleaved_launcher_ranks_are_renumbered_host_by_host),
      cmocka_unit_test(test_node_major_ranks_keep_their_numbers),
      cmocka_unit_test(test_hosts_come_in_order_of_their_lowest_launcher_rank_and_rank_0_stays_0),
      cmocka_unit_test(test_hosts_of_a_group_are_counted_and_named_with_their_ranks),
      cmocka_unit_test(test_the_environment_switch_is_off_unless_set_to_something_other_than_0),
      cmocka_unit_test(test_this_host_identity_names_host_boot_net_and_pid_namespace),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
