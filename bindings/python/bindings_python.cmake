# bindings/python/bindings_python.cmake: the Python binding's ctest declarations, beside the
# pytest suite they run (bindings/python/tests); tests/CMakeLists.txt includes it.
#
# bindings_python — the Python binding (bindings/python) under pytest, with the interpreter it was
# built for (/usr/bin/python3 by default):
#
#   bindings_python              pytest bindings/python/tests against the build tree's package:
#                                layout/enums/errors/buffers, then multi-rank scenarios started
#                                with `pstate run -n 2|4` (lifecycle, TP x PP group info, every op
#                                on float32 and int64, objects, tensor dicts, error mapping, GIL
#                                release, a peer killed mid-op; torch tensors: test_torch.py, needs
#                                python3-torch, skipped without it)
#   bindings_python_example      docs/bindings.md's example: pstate run -n 2 -- python3 two_ranks.py
#   bindings_python_pip_install  `pip install --target` of a read-only copy of bindings/python
#                                (offline, SWIG at build time; nothing may be written into the
#                                copy: pip's in-tree build is moved out), the installed metadata's
#                                version = pstate.__version__, then the layout and argument tests,
#                                the ops scenario and the tensor-dict scenario against it
if(NOT CMAKE_SCRIPT_MODE_FILE)
  if(NOT TARGET pstate_python)
    message(STATUS "bindings_python tests not declared: the Python binding is not built")
    return()
  endif()
  set(_env "PYTHONPATH=${PSTATE_PYTHON_DIR}" "PSTATE_CLI=$<TARGET_FILE:pstate_cli>" "PYTHONDONTWRITEBYTECODE=1"
           "PSTATE_TRACE_DIR=${PROJECT_BINARY_DIR}/bindings/python/pstate-trace"
           "PSTATE_BUILD_DIR=${PROJECT_BINARY_DIR}")
  add_test(NAME bindings_python
           COMMAND ${PSTATE_PYTHON_EXECUTABLE} -m pytest -q -p no:cacheprovider ${PROJECT_SOURCE_DIR}/bindings/python/tests)
  set_tests_properties(bindings_python PROPERTIES TIMEOUT 600 ENVIRONMENT "${_env}")
  add_test(NAME bindings_python_example
           COMMAND $<TARGET_FILE:pstate_cli> run -n 2 -- ${PSTATE_PYTHON_EXECUTABLE}
                   ${PROJECT_SOURCE_DIR}/bindings/python/examples/two_ranks.py)
  set_tests_properties(bindings_python_example PROPERTIES TIMEOUT 300 ENVIRONMENT "${_env}")
  add_test(NAME bindings_python_pip_install
           COMMAND ${CMAKE_COMMAND} -DPYTHON=${PSTATE_PYTHON_EXECUTABLE} -DSOURCE=${PROJECT_SOURCE_DIR}
                   -DWORK=${PROJECT_BINARY_DIR}/bindings/pip_install -DLIB_DIR=$<TARGET_FILE_DIR:pstate>
                   -DCLI=$<TARGET_FILE:pstate_cli> -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(bindings_python_pip_install PROPERTIES TIMEOUT 600)
  return()
endif()

# Script mode: the pip install test, from a copy of the sources made read-only (as a checkout on
# a read-only mount; root ignores the mode bits, so the test also compares the copy's files
# before and after: setup.py must build in a temporary folder, not in place).
if(EXISTS ${WORK}/src)
  execute_process(COMMAND chmod -R u+w ${WORK}/src)
endif()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/src/bindings)
file(COPY ${SOURCE}/include DESTINATION ${WORK}/src)
file(COPY ${SOURCE}/bindings/pstate.i ${SOURCE}/bindings/python DESTINATION ${WORK}/src/bindings
     PATTERN build EXCLUDE PATTERN *.egg-info EXCLUDE PATTERN __pycache__ EXCLUDE)
execute_process(COMMAND chmod -R a-w ${WORK}/src)
file(GLOB_RECURSE before LIST_DIRECTORIES true RELATIVE ${WORK}/src ${WORK}/src/*)
set(ENV{PSTATE_LIB_DIR} ${LIB_DIR})
execute_process(COMMAND ${PYTHON} -m pip install --no-index --no-build-isolation --disable-pip-version-check
                        --target ${WORK}/site ${WORK}/src/bindings/python
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pip install bindings/python failed (${rc}); needs python3-pip, python3-setuptools, python3-wheel, swig:\n${out}\n${err}")
endif()
file(GLOB_RECURSE after LIST_DIRECTORIES true RELATIVE ${WORK}/src ${WORK}/src/*)
execute_process(COMMAND chmod -R u+w ${WORK}/src)
if(NOT before STREQUAL after)
  list(REMOVE_ITEM after ${before})
  message(FATAL_ERROR "pip install wrote into the source folder (it must build out of tree): ${after}")
endif()
message(STATUS "pip install: ok, nothing written into the sources")
set(ENV{PYTHONPATH} ${WORK}/site)
set(ENV{PSTATE_CLI} ${CLI})
set(ENV{PYTHONDONTWRITEBYTECODE} 1)
unset(ENV{PSTATE_LIB_DIR})
execute_process(COMMAND ${PYTHON} -c "import pstate, sys; assert pstate.__file__.startswith(sys.argv[1]), pstate.__file__"
                        ${WORK}/site RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the installed pstate package is not the one imported")
endif()
execute_process(COMMAND ${PYTHON} -c "import importlib.metadata as m, pstate; v = m.version('pstate'); \
assert isinstance(pstate.__version__, str) and v == pstate.__version__, (v, pstate.__version__)" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the installed metadata's version is not pstate.__version__")
endif()
execute_process(COMMAND ${PYTHON} -m pytest -q -p no:cacheprovider ${SOURCE}/bindings/python/tests/test_layout.py
                        ${SOURCE}/bindings/python/tests/test_arguments.py
                        "${SOURCE}/bindings/python/tests/test_multirank.py::test_every_op_on_float32_and_int64_world_tp_pp_four_ranks"
                        "${SOURCE}/bindings/python/tests/test_tensor_dict.py::test_every_dtype_shape_and_order_arrives_three_ranks"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tests against the pip-installed package failed")
endif()
