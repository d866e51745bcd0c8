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
