# tests/trace/trace.cmake: beside scenarios.sh and hang_rank.c, what it runs; tests/CMakeLists.txt
# includes it.
#
# trace.cmake — the flight recorder end to end (issue 14): tests/trace/scenarios.sh runs a job of
# four ranks that goes wrong on purpose (tests/trace/hang_rank.c: a skipped all_reduce, a different
# collective, a different count, a stopped rank, a rank idle in its own code, a killed rank) under
# `pstate run`, then checks that `pstate doctor` names the culprit rank, group and operation in the
# first line of its verdict; `ctrlc` stops a hung job with SIGINT to `pstate run`, which asks every
# rank for its dump first; `good` is the control (exit 0); `shrunk`: a rank dies, the survivors
# shrink (--keep-going) and a later hang is blamed on the rank that hangs, not on the dead one.
add_executable(hang_rank ${PROJECT_SOURCE_DIR}/tests/trace/hang_rank.c)
target_compile_options(hang_rank PRIVATE ${PSTATE_C_WARNINGS})
target_link_libraries(hang_rank PRIVATE pstate)
foreach(scenario IN ITEMS skip kind count sigstop usercode dies ctrlc good shrunk)
  add_test(NAME trace_${scenario} COMMAND bash ${PROJECT_SOURCE_DIR}/tests/trace/scenarios.sh ${scenario})
  set_tests_properties(trace_${scenario} PROPERTIES TIMEOUT 120 LABELS trace
                       ENVIRONMENT "${PSTATE_TEST_ENV};HANG_RANK=$<TARGET_FILE:hang_rank>;PSTATE_CLI=$<TARGET_FILE:pstate_cli>")
endforeach()
