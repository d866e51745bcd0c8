# tests/cli/cli_layout.cmake: beside cli_layout_reference.py, the script it runs, with the other
# `pstate` command tests; tests/CMakeLists.txt includes it.
#
# cli_layout — the `pstate` command against an independent Python reference of SGLang's formulas
# (cli_layout_reference.py): --json output, error exits, --help/--version/info.
find_program(PSTATE_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
find_program(PSTATE_PYTHON3 python3)
if(NOT PSTATE_PYTHON3)
  message(WARNING "python3 not found: the cli_layout tests are not declared")
  return()
endif()
foreach(mode IN ITEMS json errors help)
  add_test(NAME cli_layout_${mode}
           COMMAND ${PSTATE_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/cli_layout_reference.py $<TARGET_FILE:pstate_cli> ${mode})
  set_tests_properties(cli_layout_${mode} PROPERTIES TIMEOUT 300)
endforeach()
# cli_layout_vllm_* — `pstate layout --engine vllm` against vLLM's formula computed with numpy
# (cli_layout_vllm_reference.py): every configuration up to world 64 through --batch, and the
# refusals. Skipped (exit 77) where the python3 found has no numpy.
foreach(mode IN ITEMS json errors)
  add_test(NAME cli_layout_vllm_${mode}
           COMMAND ${PSTATE_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/cli_layout_vllm_reference.py $<TARGET_FILE:pstate_cli> ${mode})
  set_tests_properties(cli_layout_vllm_${mode} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
