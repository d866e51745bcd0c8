# tests/startup/startup.cmake: beside startup.sh and startup_rank.c, what it runs;
# tests/CMakeLists.txt includes it.
#
# startup.cmake — start-up deployed wrongly (issue 19): tests/startup/startup.sh runs one scenario
# per test (a wrong WORLD_SIZE, a duplicate RANK, a missing rank, an HTTP server on MASTER_PORT,
# two jobs on one port, file:// leftovers, `pstate run` waiting on a hung rank, ...) with ranks
# started by hand (tests/startup/startup_rank.c), checking every rank's status, time and message.
# Scenarios that need root exit 77 (skipped) without it.
add_executable(startup_rank ${PROJECT_SOURCE_DIR}/tests/startup/startup_rank.c)
target_compile_options(startup_rank PRIVATE ${PSTATE_C_WARNINGS})
target_link_libraries(startup_rank PRIVATE pstate)
set(PSTATE_STARTUP_SCENARIOS
    wrong_world_size duplicate_rank rank_out_of_range wrong_token missing_rank two_rank_zero foreign_service
    two_jobs_job_id two_jobs_no_id file_leftover_killed file_leftover_finished file_other_user init_timeout
    run_max_wait run_root_cause)
foreach(scenario IN LISTS PSTATE_STARTUP_SCENARIOS)
  add_test(NAME startup_${scenario} COMMAND bash ${PROJECT_SOURCE_DIR}/tests/startup/startup.sh ${scenario})
  set_tests_properties(startup_${scenario} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS startup
                       ENVIRONMENT "${PSTATE_TEST_ENV};STARTUP_RANK=$<TARGET_FILE:startup_rank>;PSTATE_CLI=$<TARGET_FILE:pstate_cli>")
endforeach()
