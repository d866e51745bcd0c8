# tests/abi/abi.cmake: the gate's ctest declarations, beside the script it runs
# (tests/abi/test_gate.sh, variants.py); tests/CMakeLists.txt includes it.
#
# abi — the ABI gate (abi/check.sh; docs/abi.md, "The gate"), label `abi` (ctest -L abi):
#
#   abi_gate            this tree against the baseline abi/libpstate.so.<major>.abi: identical, or
#                       grown by additions only; the probe the gate builds exports exactly the
#                       pstate_* symbols of this build's libpstate, and where this build has full
#                       debug info (RelWithDebInfo, Debug) abidw's description of the real library
#                       equals the probe's (the probe stands for the library)
#   abi_gate_variants   patched copies of this source (tests/abi/variants.py): every breaking
#                       change refused, every addition let through, a break with its SONAME bump
#                       answered with "regenerate the baseline" (tests/abi/test_gate.sh)
#
# Both skip (77) without abigail-tools. They share build/abi (the probe of these sources, which
# .ci/run's check leaves there too) and so never run at once.
string(TOUPPER "${CMAKE_BUILD_TYPE}" _pstate_bt)
set(_pstate_abi_args --source ${PROJECT_SOURCE_DIR} --work ${PROJECT_BINARY_DIR}/abi --library $<TARGET_FILE:pstate>)
if(NOT PSTATE_SANITIZE AND " ${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_${_pstate_bt}} " MATCHES " -g[23]? ")
  list(APPEND _pstate_abi_args --library-abi)
endif()
add_test(NAME abi_gate COMMAND ${CMAKE_COMMAND} -E env CXX=${CMAKE_CXX_COMPILER} ${PROJECT_SOURCE_DIR}/abi/check.sh
                               ${_pstate_abi_args})
add_test(NAME abi_gate_variants COMMAND ${CMAKE_COMMAND} -E env CXX=${CMAKE_CXX_COMPILER}
                                        ${PROJECT_SOURCE_DIR}/tests/abi/test_gate.sh ${PROJECT_BINARY_DIR})
set_tests_properties(abi_gate abi_gate_variants PROPERTIES LABELS abi SKIP_RETURN_CODE 77 RESOURCE_LOCK pstate_abi_probe)
set_tests_properties(abi_gate PROPERTIES TIMEOUT 300)
set_tests_properties(abi_gate_variants PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE) # 13 compiles of the probe: alone under ctest -j
