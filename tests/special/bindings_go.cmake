# bindings_go — the Go binding (bindings/go; the go tool runs SWIG on pstate.i):
#
#   bindings_go_vet   gofmt -l is empty and `go vet -a ./...` is clean, SWIG's generated code
#                     included (-a: the go tool's cache otherwise hides the generated file from vet)
#   bindings_go_test  `go test ./...` with GODEBUG=cgocheck=2: layout, dtypes, errors.Is, and
#                     multi-rank tests that relaunch the test binary with `pstate run -n 2|4`
#   bindings_go_example docs/bindings.md's example: pstate run -n 2 -- tworanks
include(${PROJECT_SOURCE_DIR}/bindings/env.cmake)
if(NOT TARGET pstate_go)
  message(STATUS "bindings_go tests not declared: the Go binding is not built")
  return()
endif()
set(_go_dir ${PROJECT_SOURCE_DIR}/bindings/go)
get_filename_component(_gofmt_dir ${PSTATE_GO} DIRECTORY)
add_test(NAME bindings_go_vet
         COMMAND ${CMAKE_COMMAND} -E env ${PSTATE_GO_ENV}
                 sh -c "test -z \"$(${_gofmt_dir}/gofmt -l .)\" || { echo 'gofmt -l:'; ${_gofmt_dir}/gofmt -l .; exit 1; }; ${PSTATE_GO} vet -a ./... && echo 'go vet: clean'"
         WORKING_DIRECTORY ${_go_dir})
add_test(NAME bindings_go_test
         COMMAND ${CMAKE_COMMAND} -E env ${PSTATE_GO_ENV} "GODEBUG=cgocheck=2" "PSTATE_CLI=$<TARGET_FILE:pstate_cli>"
                 ${PSTATE_GO} test -count=1 -v ./...
         WORKING_DIRECTORY ${_go_dir})
add_test(NAME bindings_go_example COMMAND $<TARGET_FILE:pstate_cli> run -n 2 -- ${PROJECT_BINARY_DIR}/bindings/go/tworanks)
set_tests_properties(bindings_go_vet bindings_go_test bindings_go_example PROPERTIES TIMEOUT 600)
