// test_cuda_lib.cpp — the CUDA runtime loader and CUDA contexts where no GPU can be used.
//
// CI machines have the CUDA toolkit (headers, libcudart, NCCL) but no driver and no GPU: there
// the backend must load, then say "no CUDA device" plainly with PSTATE_ERR_UNSUPPORTED, without
// crashing. On a machine with a GPU the no-device tests skip (tests/gpu/ covers that case). In a
// build without the toolkit, the same entry points must say the backend was not built.
#include "common/error.hpp"
#include "common/log.hpp"
#include "transport/device_comm.hpp"

#include <functional>
#include <string>

#ifdef PSTATE_HAVE_CUDA
#include "transport/nccl/cuda_lib.hpp"

#include <dlfcn.h>
#include <time.h>

#ifndef PSTATE_CUDA_STUBS_DIR
#define PSTATE_CUDA_STUBS_DIR "/usr/local/cuda/lib64/stubs"
#endif
#endif

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

// Runs fn, which must throw pstate::Error with `status`; returns its message.
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

pstate::Logger quiet() { return pstate::Logger(pstate::LogLevel::kNone); }

#ifdef PSTATE_HAVE_CUDA

// True when this machine has a usable GPU: the no-device tests do not apply there.
bool host_has_cuda_device() {
  try {
    return pstate::CudaLib::load()->device_count() > 0;
  } catch (const pstate::Error &) {
    return false;
  }
}

void test_cuda_runtime_loads_without_a_gpu(void **) {
  auto cuda = pstate::CudaLib::load();
  assert_true(contains(cuda->library(), "libcudart.so"));
  assert_true(cuda->runtime_version() >= 12000);
  assert_true(contains(cuda->describe(), "runtime 1"));
}

void test_device_count_without_gpu_is_unsupported_no_cuda_device(void **) {
  if (host_has_cuda_device()) skip();
  auto cuda = pstate::CudaLib::load();
  std::string message = error_of([&] { cuda->device_count(); }, PSTATE_ERR_UNSUPPORTED);
  assert_true(contains(message, "no CUDA device: cudaGetDeviceCount: "));
  if (cuda->driver_version() == 0) assert_true(contains(message, "insufficient driver"));
  assert_true(contains(message, "PSTATE_DEVICE_CPU"));  // says what to do
}

void test_cuda_context_without_gpu_is_unsupported_no_cuda_device(void **) {
  if (host_has_cuda_device()) skip();
  pstate::DeviceContextOptions options;
  std::string message = error_of([&] { pstate::make_cuda_device_context(options, quiet()); }, PSTATE_ERR_UNSUPPORTED);
  assert_true(contains(message, "no CUDA device"));
}

void test_backend_status_says_built_and_why_not_usable(void **) {
  pstate::CudaBackendStatus s = pstate::cuda_backend_status();
  assert_true(s.built);
  assert_true(contains(s.build, "built with CUDA"));
  assert_true(contains(s.cuda_runtime, "libcudart.so"));
  if (host_has_cuda_device()) {
    assert_true(s.device_count > 0);
    return;
  }
  assert_false(s.usable);
  assert_int_equal(s.device_count, 0);
  assert_true(contains(s.summary, "not usable: no CUDA device"));
}

void test_host_pointer_check_accepts_host_memory(void **) {
  pstate::HostPointerCheck check;
  int on_stack = 0;
  std::string on_heap(64, 'x');
  check.require_host(&on_stack, "send", "world:0: all_reduce");
  check.require_host(on_heap.data(), "recv", "world:0: all_reduce");
  check.require_host(nullptr, "recv", "world:0: all_reduce");
}

// The check remembers that no driver was loaded (it rescans only when the loader's count of
// loaded objects changed, and not within one tick of the coarse clock), yet notices one loaded
// afterwards, from the next tick on.
void test_host_pointer_check_notices_a_driver_loaded_later(void **) {
  pstate::HostPointerCheck check;
  if (check.cuda_loaded()) skip();  // this process has a driver already
  assert_false(check.cuda_loaded());  // answered from the cache
  void *stub = dlopen(PSTATE_CUDA_STUBS_DIR "/libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (stub == nullptr) skip();
  struct timespec tick {};
  clock_getres(CLOCK_MONOTONIC_COARSE, &tick);
  tick.tv_nsec = tick.tv_nsec * 2 + 1000000;  // two ticks and a millisecond: the next tick has come
  nanosleep(&tick, nullptr);
  assert_true(check.cuda_loaded());
  int on_stack = 0;
  check.require_host(&on_stack, "send", "world:0: all_reduce");
  dlclose(stub);
}

// With a libcuda loaded (the toolkit's stub here: its calls all fail), the check looks the
// pointer up through the driver and still accepts host memory.
void test_host_pointer_check_with_a_driver_loaded_accepts_host_memory(void **) {
  void *stub = dlopen(PSTATE_CUDA_STUBS_DIR "/libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (stub == nullptr) skip();
  pstate::HostPointerCheck check;
  int on_stack = 0;
  check.require_host(&on_stack, "send", "world:0: all_reduce");
  dlclose(stub);
}

#else  // a build without the CUDA toolkit

void test_cuda_context_in_build_without_backend_is_unsupported(void **) {
  pstate::DeviceContextOptions options;
  std::string message = error_of([&] { pstate::make_cuda_device_context(options, quiet()); }, PSTATE_ERR_UNSUPPORTED);
  assert_true(contains(message, "built without the CUDA backend"));
}

void test_backend_status_says_not_built(void **) {
  pstate::CudaBackendStatus s = pstate::cuda_backend_status();
  assert_false(s.built);
  assert_false(s.usable);
  assert_true(contains(s.summary, "built without the CUDA backend"));
}

#endif

}  // namespace

int main() {
  const struct CMUnitTest tests[] = {
#ifdef PSTATE_HAVE_CUDA
      cmocka_unit_test(test_cuda_runtime_loads_without_a_gpu),
      cmocka_unit_test(test_device_count_without_gpu_is_unsupported_no_cuda_device),
      cmocka_unit_test(test_cuda_context_without_gpu_is_unsupported_no_cuda_device),
      cmocka_unit_test(test_backend_status_says_built_and_why_not_usable),
      cmocka_unit_test(test_host_pointer_check_accepts_host_memory),
      cmocka_unit_test(test_host_pointer_check_notices_a_driver_loaded_later),
      cmocka_unit_test(test_host_pointer_check_with_a_driver_loaded_accepts_host_memory),
#else
      cmocka_unit_test(test_cuda_context_in_build_without_backend_is_unsupported),
      cmocka_unit_test(test_backend_status_says_not_built),
#endif
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
