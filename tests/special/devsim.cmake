# devsim: the host-memory CUDA runtime and NCCL stand-ins (tests/devsim/) and the suite that runs
# pstate's device path on them (ctest label `devsim`). Needs only the CUDA and NCCL headers.
if(PSTATE_HAVE_CUDA)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/devsim ${CMAKE_CURRENT_BINARY_DIR}/devsim)
endif()
