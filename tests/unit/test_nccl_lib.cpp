// test_nccl_lib.cpp — loading NCCL at run time, on any host (no GPU needed).
//
// Proves: libnccl.so.2 loads through the loader and reports its version; PSTATE_NCCL_LIBRARY
// naming a missing file (or a library that is not NCCL) gives a message naming the path and the
// variable; ncclGetUniqueId works through the loaded table; ncclResult_t maps to pstate statuses.
// NCCL's bootstrap is kept on the loopback interface (NCCL_SOCKET_IFNAME=lo). Each test restores
// PSTATE_NCCL_LIBRARY to unset.
#include "common/error.hpp"

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#ifdef PSTATE_HAVE_CUDA
#include "transport/nccl/nccl_lib.hpp"

// cmocka last: its fail()/skip() macros would rewrite names in the C++ headers.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {  // cmocka 1.1 declares its functions without C linkage for C++
#include <cmocka.h>
}


namespace {

bool contains(const std::string &text, const char *part) { return text.find(part) != std::string::npos; }

std::string error_of(const std::function<void()> &fn, pstate_status_t status) {
  try {
    fn();
  } catch (const pstate::Error &e) {
    if (e.status() != status) fail_msg("status %s, expected %s: %s", pstate_status_string(e.status()),
                                       pstate_status_string(status), e.what());
    return e.what();
  }
  fail_msg("no error, expected %s", pstate_status_string(status));
  return "";
}

int unset_variable(void **) {
  unsetenv(pstate::NcclLib::kPathVariable);
  return 0;
}

void test_nccl_loads_and_reports_its_version(void **) {
  auto nccl = pstate::NcclLib::load();
  assert_true(nccl->version() >= pstate::NcclLib::kMinVersion);
  assert_string_equal(nccl->library().c_str(), "libnccl.so.2");
  assert_true(contains(nccl->describe(), "(NCCL 2."));
}

void test_nccl_variable_naming_a_missing_file_names_path_and_variable(void **) {
  setenv(pstate::NcclLib::kPathVariable, "/nonexistent/libnccl.so.2", 1);
  std::string message = error_of([] { pstate::NcclLib::load(); }, PSTATE_ERR_UNSUPPORTED);
  assert_true(contains(message, "NCCL library not found"));
  assert_true(contains(message, "PSTATE_NCCL_LIBRARY=/nonexistent/libnccl.so.2"));
  assert_true(contains(message, "No such file"));
}

void test_nccl_variable_naming_a_library_that_is_not_nccl_says_what_is_missing(void **) {
  setenv(pstate::NcclLib::kPathVariable, "libc.so.6", 1);
  std::string message = error_of([] { pstate::NcclLib::load(); }, PSTATE_ERR_UNSUPPORTED);
  assert_true(contains(message, "PSTATE_NCCL_LIBRARY=libc.so.6 lacks ncclGetVersion"));
}

void test_nccl_empty_variable_means_the_default_library(void **) {
  setenv(pstate::NcclLib::kPathVariable, "", 1);
  assert_string_equal(pstate::NcclLib::load()->library().c_str(), "libnccl.so.2");
}

void test_nccl_unique_id_through_the_loader_is_fresh_each_time(void **) {
  auto nccl = pstate::NcclLib::load();
  ncclUniqueId a = nccl->unique_id("test");
  ncclUniqueId b = nccl->unique_id("test");
  ncclUniqueId zero;
  std::memset(&zero, 0, sizeof zero);
  assert_memory_not_equal(&a, &zero, sizeof a);
  assert_memory_not_equal(&a, &b, sizeof a);
}

void test_nccl_results_map_to_pstate_statuses(void **) {
  assert_int_equal(pstate::status_of(ncclSuccess), PSTATE_OK);
  assert_int_equal(pstate::status_of(ncclRemoteError), PSTATE_ERR_PEER_LOST);
  assert_int_equal(pstate::status_of(ncclInvalidArgument), PSTATE_ERR_INVALID_ARGUMENT);
  assert_int_equal(pstate::status_of(ncclInvalidUsage), PSTATE_ERR_INVALID_STATE);
  assert_int_equal(pstate::status_of(ncclSystemError), PSTATE_ERR_TRANSPORT);
  assert_int_equal(pstate::status_of(ncclUnhandledCudaError), PSTATE_ERR_TRANSPORT);
  assert_int_equal(pstate::status_of(ncclInternalError), PSTATE_ERR_TRANSPORT);
  assert_true(pstate::is_fatal(ncclRemoteError));
  assert_false(pstate::is_fatal(ncclInvalidArgument));
}

void test_nccl_error_text_names_the_result(void **) {
  auto nccl = pstate::NcclLib::load();
  std::string text = nccl->error_text(ncclRemoteError, nullptr);
  assert_true(contains(text, "ncclRemoteError: "));
  assert_true(contains(text, "NCCL_DEBUG=WARN"));
}

}  // namespace

int main() {
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  setenv("NCCL_HOSTID", "pstate-test", 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_nccl_loads_and_reports_its_version, unset_variable),
      cmocka_unit_test_teardown(test_nccl_variable_naming_a_missing_file_names_path_and_variable, unset_variable),
      cmocka_unit_test_teardown(test_nccl_variable_naming_a_library_that_is_not_nccl_says_what_is_missing,
                                unset_variable),
      cmocka_unit_test_teardown(test_nccl_empty_variable_means_the_default_library, unset_variable),
      cmocka_unit_test_teardown(test_nccl_unique_id_through_the_loader_is_fresh_each_time, unset_variable),
      cmocka_unit_test(test_nccl_results_map_to_pstate_statuses),
      cmocka_unit_test_teardown(test_nccl_error_text_names_the_result, unset_variable),
  };
  unsetenv(pstate::NcclLib::kPathVariable);
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}

#else  // without the CUDA backend there is no NCCL loader to test

#include <cstdio>

int main() {
  printf("test_nccl_lib: built without the CUDA backend, nothing to test\n");
  return 0;
}

#endif
