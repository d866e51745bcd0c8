# tests/api/transport_variants.cmake: beside the API tests it runs again with a path forced;
# tests/CMakeLists.txt includes it.
#
# transport_variants.cmake — the end-to-end suites again with each path forced, so both the
# shared-memory path (the default inside a host) and the UCX path (between hosts, or PSTATE_SHM=0)
# and every algorithm of the selector are exercised by the same checks.
add_test(NAME test_collectives_ucx_path COMMAND test_collectives)
set_tests_properties(test_collectives_ucx_path PROPERTIES TIMEOUT 600
                     ENVIRONMENT "PSTATE_SHM=0;${PSTATE_TEST_ENV}")
add_test(NAME test_collectives_ucx_ring_chain COMMAND test_collectives)
set_tests_properties(test_collectives_ucx_ring_chain PROPERTIES TIMEOUT 600
                     ENVIRONMENT "PSTATE_SHM=0;PSTATE_ALGO_ALLREDUCE=ring;PSTATE_ALGO_ALLGATHER=ring;PSTATE_ALGO_BROADCAST=pipelined_chain;${PSTATE_TEST_ENV}")
add_test(NAME test_collectives_ucx_doubling_bruck COMMAND test_collectives)
set_tests_properties(test_collectives_ucx_doubling_bruck PROPERTIES TIMEOUT 600
                     ENVIRONMENT "PSTATE_SHM=0;PSTATE_ALGO_ALLREDUCE=recursive_doubling;PSTATE_ALGO_ALLGATHER=bruck;PSTATE_ALGO_BROADCAST=binomial;${PSTATE_TEST_ENV}")
add_test(NAME test_faults_ucx_path COMMAND test_faults)
set_tests_properties(test_faults_ucx_path PROPERTIES TIMEOUT 600 ENVIRONMENT "PSTATE_SHM=0;${PSTATE_TEST_ENV}")
add_test(NAME test_large_and_bitwise_ucx_path COMMAND test_large_and_bitwise)
set_tests_properties(test_large_and_bitwise_ucx_path PROPERTIES TIMEOUT 600
                     ENVIRONMENT "PSTATE_SHM=0;${PSTATE_TEST_ENV}")
add_test(NAME test_p2p_nonblocking_ucx_path COMMAND test_p2p_nonblocking)
set_tests_properties(test_p2p_nonblocking_ucx_path PROPERTIES TIMEOUT 600
                     ENVIRONMENT "PSTATE_SHM=0;${PSTATE_TEST_ENV}")
