# tests/packages/packages.cmake: beside test_deb.sh and test_short_path.sh, what it runs;
# tests/CMakeLists.txt includes it.
#
# packages — the .deb round trip (tests/packages/test_deb.sh): cpack builds libpstate1,
# libpstate-dev, pstate and python3-pstate from this build tree; they are installed with apt-get in
# a throwaway root (overlay over /, private mount namespace), used, purged. Needs root (skipped
# otherwise) and the Python binding (python3-pstate is one of the four).
if(NOT TARGET pstate_python)
  message(STATUS "pstate tests: packages_deb skipped (no Python binding to package)")
  return()
endif()
add_test(NAME packages_deb COMMAND ${CMAKE_CURRENT_LIST_DIR}/test_deb.sh ${PROJECT_BINARY_DIR})
set_tests_properties(packages_deb PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 RUN_SERIAL ON)

# short_path_install — README's `./build.sh install` and `./build.sh package` from a clone at a
# short path, /tmp/pXXXX (issue 31 item 1), with only what they need built (tests/packages/
# test_short_path.sh). Not root-only; skipped (77) outside a git checkout.
add_test(NAME short_path_install COMMAND ${CMAKE_CURRENT_LIST_DIR}/test_short_path.sh ${PROJECT_SOURCE_DIR})
# Not RUN_SERIAL: its build (~2.6 CPU-minutes) overlaps the tests that wait on peers under ctest -j.
set_tests_properties(short_path_install PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77)
