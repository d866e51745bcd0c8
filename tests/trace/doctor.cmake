# tests/trace/doctor.cmake: beside doctor_fixtures.sh and fixtures/, what it runs;
# tests/CMakeLists.txt includes it.
#
# doctor — `pstate doctor` on the hand-written flight-recorder dumps of tests/trace/fixtures/
# (tests/trace/doctor_fixtures.sh): the verdict line and exit status of each scenario (mismatch,
# behind, cycle, missing rank, p2p, all good, two jobs), --json, the refusal of torn and foreign
# files, --timeline json and png. Needs bash and /usr/bin/python3; gnuplot for the PNG check.
find_program(PSTATE_BASH bash)
if(NOT PSTATE_BASH OR NOT EXISTS /usr/bin/python3)
  message(WARNING "bash or /usr/bin/python3 not found: the doctor test is not declared")
  return()
endif()
add_test(NAME doctor_fixtures
         COMMAND ${PSTATE_BASH} ${PROJECT_SOURCE_DIR}/tests/trace/doctor_fixtures.sh $<TARGET_FILE:pstate_cli>)
set_tests_properties(doctor_fixtures PROPERTIES TIMEOUT 120 LABELS doctor)
