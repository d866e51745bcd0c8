# tests/consumers/consumers.cmake: beside the consumer programs it builds (consumer.c,
# dlopen_consumer.c, cmake/); tests/CMakeLists.txt includes it.
#
# consumers — an installed pstate works for the three kinds of user it promises to serve.
#
#   consumers_install          cmake --install into a fresh prefix under the build tree (fixture)
#   consumer_pkgconfig         a C program built only with `pkg-config --cflags --libs pstate`, run
#                              without LD_LIBRARY_PATH (the prefix is not one the loader searches:
#                              pstate.pc gives the rpath)
#   consumer_cmake_package     a CMake project using find_package(pstate CONFIG) -> pstate::pstate
#   consumer_dlopen_get_api    a program that dlopens libpstate.so.<major> and dlsyms only pstate_get_api
#
# Included from tests/CMakeLists.txt this file declares the tests; run with `cmake -P -DSTEP=...`
# (as the tests do) it performs one step. Sources live in tests/consumers/.
if(NOT CMAKE_SCRIPT_MODE_FILE)
  set(_work ${PROJECT_BINARY_DIR}/tests/consumers_work)
  set(_args -DWORK=${_work} -DBUILD_DIR=${PROJECT_BINARY_DIR} -DSOURCES=${PROJECT_SOURCE_DIR}/tests/consumers
            -DCC=${CMAKE_C_COMPILER} -DGENERATOR=${CMAKE_GENERATOR} -DMAJOR=${PROJECT_VERSION_MAJOR})
  foreach(step IN ITEMS install pkgconfig cmake_package dlopen_get_api)
    set(name consumer_${step})
    if(step STREQUAL "install")
      set(name consumers_install)
    endif()
    add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} ${_args} -DSTEP=${step} -P ${CMAKE_CURRENT_LIST_FILE})
    set_tests_properties(${name} PROPERTIES TIMEOUT 300)
    if(step STREQUAL "install")
      set_tests_properties(${name} PROPERTIES FIXTURES_SETUP pstate_installed)
    else()
      set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED pstate_installed)
    endif()
  endforeach()
  return()
endif()

set(prefix ${WORK}/prefix)

# Runs a command; fails the test with its output when it fails.
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${what}: ok\n${out}")
endfunction()

# The installed library directory (lib or lib/<multiarch>, as GNUInstallDirs chose).
function(find_libdir out)
  file(GLOB_RECURSE found LIST_DIRECTORIES false ${prefix}/*/libpstate.so.${MAJOR})
  if(NOT found)
    message(FATAL_ERROR "no libpstate.so.${MAJOR} under ${prefix}: run consumers_install first")
  endif()
  list(GET found 0 lib)
  get_filename_component(dir ${lib} DIRECTORY)
  set(${out} ${dir} PARENT_SCOPE)
endfunction()

if(STEP STREQUAL "install")
  file(REMOVE_RECURSE ${WORK})
  run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
  foreach(f include/pstate/pstate.h bin/pstate)
    if(NOT EXISTS ${prefix}/${f})
      message(FATAL_ERROR "cmake --install did not install ${f}")
    endif()
  endforeach()
  find_libdir(libdir)
  foreach(f pkgconfig/pstate.pc cmake/pstate/pstateConfig.cmake cmake/pstate/pstateConfigVersion.cmake)
    if(NOT EXISTS ${libdir}/${f})
      message(FATAL_ERROR "cmake --install did not install ${libdir}/${f}")
    endif()
  endforeach()
  run("installed pstate layout" ${prefix}/bin/pstate layout --world 4 --json)

elseif(STEP STREQUAL "pkgconfig")
  find_libdir(libdir)
  set(ENV{PKG_CONFIG_PATH} ${libdir}/pkgconfig)
  execute_process(COMMAND pkg-config --cflags --libs pstate RESULT_VARIABLE rc OUTPUT_VARIABLE flags
                  ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config --cflags --libs pstate failed:\n${err}")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  file(MAKE_DIRECTORY ${WORK}/pkgconfig)
  run("build with pkg-config flags" ${CC} -std=c99 -Wall -Wextra -Werror ${SOURCES}/consumer.c ${flags}
      -o ${WORK}/pkgconfig/consumer)
  # No LD_LIBRARY_PATH: the prefix is one the loader does not search, so the installed pstate.pc
  # carries the rpath (issue 31 item 2: such programs could not start).
  if(NOT flags MATCHES "-Wl,-rpath,${libdir}")
    message(FATAL_ERROR "pstate.pc of ${prefix}, outside the loader's directories, gives no rpath: ${flags}")
  endif()
  run("run pkg-config consumer" ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${WORK}/pkgconfig/consumer)

elseif(STEP STREQUAL "cmake_package")
  set(bin ${WORK}/cmake_package)
  file(REMOVE_RECURSE ${bin})
  run("configure find_package consumer" ${CMAKE_COMMAND} -S ${SOURCES}/cmake -B ${bin} -G ${GENERATOR}
      -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${CC})
  run("build find_package consumer" ${CMAKE_COMMAND} --build ${bin})
  run("run find_package consumer" ${bin}/cmake_consumer)

elseif(STEP STREQUAL "dlopen_get_api")
  find_libdir(libdir)
  file(MAKE_DIRECTORY ${WORK}/dlopen)
  # Header only: no -lpstate, so the only way in is dlopen + dlsym("pstate_get_api").
  run("build dlopen consumer" ${CC} -std=c99 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -I${prefix}/include
      ${SOURCES}/dlopen_consumer.c -ldl -o ${WORK}/dlopen/dlopen_consumer)
  run("run dlopen consumer" ${WORK}/dlopen/dlopen_consumer ${libdir}/libpstate.so.${MAJOR})

else()
  message(FATAL_ERROR "consumers.cmake: unknown STEP '${STEP}'")
endif()
