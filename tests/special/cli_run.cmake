# cli_run.cmake — `pstate run`: environment, prefixes, failure propagation, exit statuses.
add_test(NAME cli_run_launcher COMMAND ${PROJECT_SOURCE_DIR}/tests/cli/test_run.sh $<TARGET_FILE:pstate_cli>)
set_tests_properties(cli_run_launcher PROPERTIES TIMEOUT 300)
