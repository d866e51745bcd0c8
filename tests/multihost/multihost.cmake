# tests/multihost/multihost.cmake: beside the mh_*.sh scripts it declares; tests/CMakeLists.txt
# includes it.
#
# multihost.cmake — tests across test hosts made of network namespaces (tests/multihost/).
#
# mh_rank is the rank program (public API only); mh_linkemu the user-space lossy cable used where
# the kernel has no tc netem. Each test is a bash script that builds its hosts, runs ranks in
# them and checks exit codes and INFO logs; it needs root and `ip netns` and is reported as
# skipped (exit 77) without them. They run one at a time (RUN_SERIAL): each spawns up to 8 ranks.
add_executable(mh_rank ${PROJECT_SOURCE_DIR}/tests/multihost/mh_rank.c)
target_compile_options(mh_rank PRIVATE ${PSTATE_C_WARNINGS})
target_link_libraries(mh_rank PRIVATE pstate pstate_test_support Threads::Threads)
add_executable(mh_linkemu ${PROJECT_SOURCE_DIR}/tests/multihost/linkemu.c)
target_compile_options(mh_linkemu PRIVATE ${PSTATE_C_WARNINGS})

set(PSTATE_MH_ENV ${PSTATE_TEST_ENV} "MH_RANK=$<TARGET_FILE:mh_rank>" "MH_LINKEMU=$<TARGET_FILE:mh_linkemu>"
    "PSTATE_CLI=$<TARGET_FILE:pstate_cli>" "STARTUP_RANK=$<TARGET_FILE:startup_rank>"
    "LAUNCH_RANK=$<TARGET_FILE:launch_rank>")
file(GLOB PSTATE_MH_SCRIPTS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/multihost/mh_*.sh)
foreach(script IN LISTS PSTATE_MH_SCRIPTS)
  get_filename_component(name ${script} NAME_WE)
  string(REGEX REPLACE "^mh_" "multihost_" name ${name})
  if(name STREQUAL "multihost_lib")
    continue()
  endif()
  add_test(NAME ${name} COMMAND bash ${script})
  set_tests_properties(${name} PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE LABELS multihost
                                          ENVIRONMENT "${PSTATE_MH_ENV}")
endforeach()
