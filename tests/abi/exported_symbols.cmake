# tests/abi/exported_symbols.cmake: with the other checks of what the library exposes (the ABI
# gate, header_rules.py); tests/CMakeLists.txt includes it, ctest runs it with -P.
#
# exported_symbols — libpstate.so.<major> exports nothing but pstate_*, each under the version
# node PSTATE_<major>, and its SONAME is libpstate.so.<major> (libpstate.so.1, PSTATE_1).
#
# Included from tests/CMakeLists.txt this file declares the test; run with `cmake -P` (as the
# test does) it is the check: `nm -D --defined-only` must list only pstate_* symbols (plus the
# version node PSTATE_<major> of cmake/pstate.map), each as pstate_x@@PSTATE_<major>, must
# include pstate_get_api, and `readelf -d` must show SONAME libpstate.so.<major>. That every
# function of pstate.h is among them is header_check_abi_rules' (tests/abi/header_rules.py).
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
set(unversioned "")
set(count 0)
foreach(line IN LISTS lines)
  if(line STREQUAL "")
    continue()
  endif()
  string(REGEX REPLACE "^.* " "" versioned "${line}") # last field
  string(REGEX REPLACE "@.*$" "" name "${versioned}")  # drop the @@PSTATE_<major> version suffix
  if(name MATCHES "^pstate_")
    math(EXPR count "${count} + 1")
    if(NOT versioned STREQUAL "${name}@@PSTATE_${MAJOR}")
      list(APPEND unversioned "${versioned}")
    endif()
  elseif(NOT name STREQUAL "PSTATE_${MAJOR}")
    list(APPEND bad "${name}")
  endif()
endforeach()
if(bad)
  list(JOIN bad "\n  " bad_text)
  message(FATAL_ERROR "${LIB} exports symbols outside the pstate_* API:\n  ${bad_text}\n"
                      "Give them hidden visibility or keep them out of cmake/pstate.map.")
endif()
if(unversioned)
  list(JOIN unversioned "\n  " unversioned_text)
  message(FATAL_ERROR "${LIB} exports symbols outside the version node PSTATE_${MAJOR}:\n  ${unversioned_text}\n"
                      "cmake/pstate.map names one node per major: PSTATE_<major>.")
endif()
if(NOT symbols MATCHES "pstate_get_api")
  message(FATAL_ERROR "${LIB} does not export pstate_get_api")
endif()

execute_process(COMMAND readelf -d ${LIB} OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT dynamic MATCHES "\\(SONAME\\)[^\n]*\\[libpstate\\.so\\.${MAJOR}\\]")
  message(FATAL_ERROR "${LIB}: SONAME is not libpstate.so.${MAJOR}:\n${dynamic}")
endif()
message(STATUS "${LIB}: ${count} pstate_* symbols exported under PSTATE_${MAJOR}, nothing else; SONAME libpstate.so.${MAJOR}")
