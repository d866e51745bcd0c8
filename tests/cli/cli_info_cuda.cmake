# tests/cli/cli_info_cuda.cmake: with the other `pstate` command tests; tests/CMakeLists.txt
# includes it.
#
# cli_info_cuda — `pstate info` reports the CUDA backend as pstate_init would find it: a last
# "CUDA context" line with the verdict, and with PSTATE_NCCL_LIBRARY naming a missing file (in a
# build with the backend) the NCCL line names that path and the variable.
#
# Included from tests/CMakeLists.txt this file declares the test; run with `cmake -P` (as the
# test does) it is the check.
if(NOT CMAKE_SCRIPT_MODE_FILE)
  add_test(NAME cli_info_reports_cuda_backend_status
           COMMAND ${CMAKE_COMMAND} -DCLI=$<TARGET_FILE:pstate_cli> -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(cli_info_reports_cuda_backend_status PROPERTIES TIMEOUT 60)
  return()
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -E env PSTATE_NCCL_LIBRARY=/nonexistent/libnccl.so.2 ${CLI} info
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pstate info exited ${rc}: ${err}")
endif()
if(NOT out MATCHES "\n  CUDA context +(usable|not usable) +[^\n]+\n?$")
  message(FATAL_ERROR "pstate info does not end with the CUDA context verdict:\n${out}")
endif()
if(out MATCHES "CUDA/NCCL backend: built" AND NOT out MATCHES "NCCL +not usable +NCCL library not found: PSTATE_NCCL_LIBRARY=/nonexistent/libnccl.so.2")
  message(FATAL_ERROR "pstate info does not name the missing NCCL library:\n${out}")
endif()
