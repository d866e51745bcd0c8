# tests/startup/startup_counts.cmake: beside startup_counts.sh, what it runs; tests/CMakeLists.txt
# includes it.
#
# startup_counts.cmake — bench/store_protocol.cpp (issue 30): start-up's store traffic for N ranks as
# threads against the real TCP store server, and a short run of it as a test (its exact counts are
# asserted by tests/unit/test_startup_store_counts.cpp; this one proves the bench itself runs).
add_executable(store_protocol ${PROJECT_SOURCE_DIR}/bench/store_protocol.cpp)
target_compile_options(store_protocol PRIVATE ${PSTATE_WARNINGS})
target_link_libraries(store_protocol PRIVATE pstate_internal)
add_test(NAME bench_store_protocol_64 COMMAND store_protocol --sizes 16,64)
set_tests_properties(bench_store_protocol_64 PROPERTIES TIMEOUT 120)

# Whole processes (tests/startup/startup_counts.sh): every rank's start-up counts at PSTATE_DEBUG=INFO
# against the rules (store requests per rank, UCX endpoints of the world barrier, none later).
foreach(shape IN ITEMS "4;2;2" "8;2;4")
  list(GET shape 0 _n)
  add_test(NAME startup_counts_${_n}_ranks COMMAND bash ${PROJECT_SOURCE_DIR}/tests/startup/startup_counts.sh ${shape})
  set_tests_properties(startup_counts_${_n}_ranks PROPERTIES TIMEOUT 180 LABELS startup
                       ENVIRONMENT "PSTATE_BUILD_DIR=${PROJECT_BINARY_DIR};PSTATE_CLI=$<TARGET_FILE:pstate_cli>")
endforeach()
# Everything over UCX (PSTATE_SHM=0) and an all_reduce on each TP group of 4 (rank r meets r + 3,
# which the world barrier of 8 does not): each peer met after pstate_init costs exactly one store
# read of its record (rank_records.hpp).
add_test(NAME startup_counts_8_ranks_ucx COMMAND bash ${PROJECT_SOURCE_DIR}/tests/startup/startup_counts.sh 8 4 2
                                                 --op all_reduce --group tp -b 8 -e 64K -f 8 --iters 3 --warmup 1)
set_tests_properties(startup_counts_8_ranks_ucx PROPERTIES TIMEOUT 180 LABELS startup
                     ENVIRONMENT "PSTATE_SHM=0;PSTATE_BUILD_DIR=${PROJECT_BINARY_DIR};PSTATE_CLI=$<TARGET_FILE:pstate_cli>")
