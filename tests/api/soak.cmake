# tests/api/soak.cmake: beside test_soak.c, the test it runs again at full length;
# tests/CMakeLists.txt includes it.
#
# soak.cmake — the full soak on demand. test_soak (tests/api/test_soak.c) runs in every build in
# its short form (2,000 mixed operations on 4 processes, 300 on 4 threads); configure with
# -DPSTATE_SOAK_FULL=ON to add soak_full: 100,000 operations (about 3 minutes here), or run
#   PSTATE_SOAK_OPS=100000 build/tests/test_soak
# by hand. PSTATE_SOAK_SEED picks another sequence.
option(PSTATE_SOAK_FULL "Add the 100,000-operation soak test (soak_full)" OFF)
if(PSTATE_SOAK_FULL)
  add_test(NAME soak_full COMMAND test_soak)
  set_tests_properties(soak_full PROPERTIES TIMEOUT 7200 LABELS soak
                                            ENVIRONMENT "${PSTATE_TEST_ENV};PSTATE_SOAK_OPS=100000;PSTATE_SOAK_THREAD_OPS=10000")
endif()
