# tests/abi/header_compile.cmake: beside header_rules.py, the script it runs, and the ABI gate
# (the header is the ABI's text); tests/CMakeLists.txt includes it.
#
# header_compile — include/pstate/pstate.h compiles as C99 (-pedantic -Werror) and as C++17.
# Compiles tests/consumers/header_check.c, which includes the header twice and uses every
# initializer macro, with -fsyntax-only (nothing is linked or run).
set(_pstate_header_check ${PROJECT_SOURCE_DIR}/tests/consumers/header_check.c)
add_test(NAME header_compiles_as_c99_pedantic
         COMMAND ${CMAKE_C_COMPILER} -std=c99 -pedantic -Wall -Wextra -Werror -Wstrict-prototypes -fsyntax-only
                 -I${PROJECT_SOURCE_DIR}/include ${_pstate_header_check})
add_test(NAME header_compiles_as_cxx17_pedantic
         COMMAND ${CMAKE_CXX_COMPILER} -std=c++17 -pedantic -Wall -Wextra -Werror -fsyntax-only -x c++
                 -I${PROJECT_SOURCE_DIR}/include ${_pstate_header_check})
set_tests_properties(header_compiles_as_c99_pedantic header_compiles_as_cxx17_pedantic PROPERTIES TIMEOUT 60)

# header_check_abi_rules — the ABI rules of pstate.h against the header and the built library
# (tests/abi/header_rules.py): every struct starts with size_t struct_size (pstate_bytes_t
# exempt, pstate_tensor_t pending: see the script), every PSTATE_API function is in the dlopen
# table with its type and in the version script, exported as PSTATE_<major>, the table filled.
find_program(PSTATE_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(PSTATE_PYTHON3)
  set(_pstate_rules_flags)
  if(PSTATE_SANITIZE)
    set(_pstate_rules_flags -fsanitize=${PSTATE_SANITIZE})
  endif()
  add_test(NAME header_check_abi_rules
           COMMAND ${PSTATE_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/header_rules.py ${PROJECT_SOURCE_DIR} $<TARGET_FILE:pstate>
                   ${PROJECT_BINARY_DIR}/tests/header_rules ${CMAKE_CXX_COMPILER} ${_pstate_rules_flags})
  set_tests_properties(header_check_abi_rules PROPERTIES TIMEOUT 120)
endif()
