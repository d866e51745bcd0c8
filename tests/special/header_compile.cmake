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
