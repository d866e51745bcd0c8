# tests/cli/cli_run.cmake: beside the scripts it runs (test_run*.sh, test_store.sh,
# test_elastic.sh, launch_rank.c); tests/CMakeLists.txt includes it.
#
# cli_run.cmake — `pstate run`: environment, prefixes, failure propagation, exit statuses; and a
# small /dev/shm seen through it.
add_test(NAME cli_run_launcher COMMAND ${PROJECT_SOURCE_DIR}/tests/cli/test_run.sh $<TARGET_FILE:pstate_cli>)
set_tests_properties(cli_run_launcher PROPERTIES TIMEOUT 300)
# A 1 MiB /dev/shm (a container's): the cause and the fixes named, no SIGBUS, the advice works.
# Root only (mount namespace); skipped otherwise.
add_test(NAME cli_small_dev_shm COMMAND ${PROJECT_SOURCE_DIR}/tests/cli/test_small_dev_shm.sh $<TARGET_FILE:pstate_cli>)
set_tests_properties(cli_small_dev_shm PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
# `pstate store` (the store as a process of its own, other launchers) and `pstate run` serving
# its job's store: ranks by hand, PSTATE_STORE_EXTERNAL, a stranger refused, --rank0-store.
add_test(NAME cli_store COMMAND ${PROJECT_SOURCE_DIR}/tests/cli/test_store.sh $<TARGET_FILE:pstate_cli>)
set_tests_properties(cli_store PROPERTIES TIMEOUT 300)
# A job that survives a killed rank (examples/elastic_serving): --keep-going shrinks to the
# survivors, --respawn also brings a replacement back with pstate_grow.
add_test(NAME cli_elastic COMMAND ${PROJECT_SOURCE_DIR}/tests/cli/test_elastic.sh $<TARGET_FILE:pstate_cli>
                                  $<TARGET_FILE:elastic_serving>)
set_tests_properties(cli_elastic PROPERTIES TIMEOUT 300)
# One rank of the jobs below (tests/cli/launch_rank.c): ranks blocked with shared-memory names
# half made, and ranks whose own threads sleep in system calls while pstate run asks for dumps.
add_executable(launch_rank ${PROJECT_SOURCE_DIR}/tests/cli/launch_rank.c)
target_compile_options(launch_rank PRIVATE ${PSTATE_C_WARNINGS})
target_link_libraries(launch_rank PRIVATE pstate pthread)
# Ctrl-C to pstate run while the ranks wait with segments half made: nothing of the job is left
# in /dev/shm, another job's names are untouched (issue 27, item 11).
add_test(NAME cli_run_shm_leftovers
         COMMAND ${PROJECT_SOURCE_DIR}/tests/cli/test_run_shm.sh $<TARGET_FILE:pstate_cli> $<TARGET_FILE:launch_rank>)
set_tests_properties(cli_run_shm_leftovers PROPERTIES TIMEOUT 300)
# How pstate run asks for dumps: through the store, never a signal the program did not ask for
# (a rank without pstate is not killed by SIGUSR1; program threads in nanosleep, poll and read are
# not interrupted; both dumps written); --dump-signal keeps SIGUSR1 as an opt-in (issue 27, 13, 16).
add_test(NAME cli_run_dumps
         COMMAND ${PROJECT_SOURCE_DIR}/tests/cli/test_run_dumps.sh $<TARGET_FILE:pstate_cli> $<TARGET_FILE:launch_rank>)
set_tests_properties(cli_run_dumps PROPERTIES TIMEOUT 300)
# Two jobs on one host (issue 42, item 4): each pins inside its launcher's affinity and onto CPUs
# no other pstate job holds; a SIGKILLed job's CPUs go to the next job; a job with no free CPU
# runs unpinned with spinning off. Counts of Cpus_allowed_list, PSTATE_SPIN and log lines.
add_test(NAME cli_run_shared_host
         COMMAND ${PROJECT_SOURCE_DIR}/tests/cli/test_run_shared_host.sh $<TARGET_FILE:pstate_cli>)
set_tests_properties(cli_run_shared_host PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
# PSTATE_LOG_FORMAT=json (issue 45, item 4): a 2-rank job at PSTATE_DEBUG=INFO writes only JSON
# log lines on stderr (the ranks' and the launcher's), parsed by Python's json module, with the
# failed call's group, call and status; the text format is unchanged without it.
add_test(NAME cli_log_json
         COMMAND ${PROJECT_SOURCE_DIR}/tests/cli/test_log_json.sh $<TARGET_FILE:pstate_cli> $<TARGET_FILE:launch_rank>)
set_tests_properties(cli_log_json PROPERTIES TIMEOUT 300)
# Metrics read by the real thing (issue 45, items 1-2): Debian's Prometheus server scrapes a 4-rank
# `pstate run --metrics` job (the launcher's endpoint and each rank's PSTATE_METRICS_ADDR) and its
# PromQL answers equal the calls the ranks made; promtool checks both texts. Skips without it.
add_test(NAME cli_metrics_prometheus
         COMMAND ${PROJECT_SOURCE_DIR}/tests/cli/test_metrics_prometheus.sh $<TARGET_FILE:pstate_cli> $<TARGET_FILE:launch_rank>)
set_tests_properties(cli_metrics_prometheus PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
