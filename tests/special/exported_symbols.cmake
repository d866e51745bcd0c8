# exported_symbols — libpstate.so.0 exports nothing but pstate_* and its SONAME is libpstate.so.0.
#
# Included from tests/CMakeLists.txt this file declares the test; run with `cmake -P` (as the
# test does) it is the check: `nm -D --defined-only` must list only pstate_* symbols (plus the
# version node PSTATE_<major> of cmake/pstate.map), must include pstate_get_api, and
# `readelf -d` must show SONAME libpstate.so.<major>.
if(NOT CMAKE_SCRIPT_MODE_FILE)
  add_test(NAME exported_symbols_are_only_pstate
           COMMAND ${CMAKE_COMMAND} -DLIB=$<TARGET_FILE:pstate> -DMAJOR=${PROJECT_VERSION_MAJOR}
                   -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(exported_symbols_are_only_pstate PROPERTIES TIMEOUT 60)
  return()
endif()

execute_process(COMMAND nm -D --defined-only ${LIB} OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm -D --defined-only ${LIB} failed (${rc})")
endif()
string(REPLACE "\n" ";" lines "${symbols}")
set(bad "")
set(count 0)
foreach(line IN LISTS lines)
  if(line STREQUAL "")
    continue()
  endif()
  string(REGEX REPLACE "^.* " "" name "${line}")      # last field
  string(REGEX REPLACE "@.*$" "" name "${name}")      # drop @@PSTATE_0 version suffix
  if(name MATCHES "^pstate_")
    math(EXPR count "${count} + 1")
  elseif(NOT name STREQUAL "PSTATE_${MAJOR}")
    list(APPEND bad "${name}")
  endif()
endforeach()
if(bad)
  list(JOIN bad "\n  " bad_text)
  message(FATAL_ERROR "${LIB} exports symbols outside the pstate_* API:\n  ${bad_text}\n"
                      "Give them hidden visibility or keep them out of cmake/pstate.map.")
endif()
if(NOT symbols MATCHES "pstate_get_api")
  message(FATAL_ERROR "${LIB} does not export pstate_get_api")
endif()

execute_process(COMMAND readelf -d ${LIB} OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT dynamic MATCHES "\\(SONAME\\)[^\n]*\\[libpstate\\.so\\.${MAJOR}\\]")
  message(FATAL_ERROR "${LIB}: SONAME is not libpstate.so.${MAJOR}:\n${dynamic}")
endif()
message(STATUS "${LIB}: ${count} pstate_* symbols exported, nothing else; SONAME libpstate.so.${MAJOR}")
