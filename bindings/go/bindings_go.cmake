# bindings/go/bindings_go.cmake: the Go binding's ctest declarations, beside the Go tests they
# run; tests/CMakeLists.txt includes it (the tests share the suite's build folder and fixtures).
#
# bindings_go — the Go binding (bindings/go; SWIG's output for pstate.i is committed in
# internal/capi, the header and library come from `pkg-config pstate`):
#
#   bindings_go_vet   gofmt -l is empty and `go vet -a ./...` is clean, SWIG's generated code
#                     included
#   bindings_go_drift internal/capi/regenerate.sh into a temporary folder gives the committed
#                     capi.go and capi_wrap.c (else: pstate.i or pstate.h changed without them)
#   bindings_go_test  `go test ./...` with GODEBUG=cgocheck=2: layout, dtypes, errors.Is, argument
#                     checks, Interrupt, and multi-rank tests that relaunch the test binary with
#                     `pstate run -n 2|4`
#   bindings_go_outside_tree  a copy of bindings/go used through `replace` by a module outside
#                     this tree, built without SWIG and run (bindings_go_outside.cmake)
#   consumer_go_installed  the same against consumers_install's prefix (installed pstate.pc), a fresh build cache
#   bindings_go_example docs/bindings.md's example: pstate run -n 2 -- tworanks
#   bindings_go_devsim the tests that need a CUDA context (Close while a graph capture is open,
#                     capture_test.go), on the devsim stand-ins of tests/devsim (PSTATE_HAVE_CUDA:
#                     the CUDA and NCCL headers); skipped by bindings_go_test, which has none
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
                 "PSTATE_BUILD_DIR=${PROJECT_BINARY_DIR}"
                 ${PSTATE_GO} test -count=1 -v ./...
         WORKING_DIRECTORY ${_go_dir})
add_test(NAME bindings_go_example COMMAND $<TARGET_FILE:pstate_cli> run -n 2 -- ${PROJECT_BINARY_DIR}/bindings/go/tworanks)
set_tests_properties(bindings_go_vet bindings_go_test bindings_go_example PROPERTIES TIMEOUT 600)
if(PSTATE_HAVE_CUDA)  # tests/devsim builds the stand-ins (their targets resolve at generate time)
  add_test(NAME bindings_go_devsim
           COMMAND ${CMAKE_COMMAND} -E env ${PSTATE_GO_ENV} "GODEBUG=cgocheck=2"
                   "PSTATE_CUDA_RUNTIME_LIBRARY=$<TARGET_FILE:pstate_devsim_cudart>"
                   "PSTATE_NCCL_LIBRARY=$<TARGET_FILE:pstate_devsim_nccl>"
                   ${PSTATE_GO} test -count=1 -v -run "Devsim$" .
           WORKING_DIRECTORY ${_go_dir})
  set_tests_properties(bindings_go_devsim PROPERTIES TIMEOUT 300 LABELS devsim)
endif()
if(PSTATE_SWIG)
  add_test(NAME bindings_go_drift
           COMMAND ${CMAKE_COMMAND} -E env SWIG=${PSTATE_SWIG} GOFMT=${_gofmt_dir}/gofmt
                   sh -c "d=$(mktemp -d) && ./regenerate.sh $d && cmp capi.go $d/capi.go && cmp capi_wrap.c $d/capi_wrap.c; rc=$?; rm -rf $d; [ $rc = 0 ] || echo 'bindings/go/internal/capi is stale: pstate.i or pstate.h changed without it; run bindings/go/internal/capi/regenerate.sh and commit'; exit $rc"
           WORKING_DIRECTORY ${_go_dir}/internal/capi)
  set_tests_properties(bindings_go_drift PROPERTIES TIMEOUT 120)
endif()
add_test(NAME bindings_go_outside_tree
         COMMAND ${CMAKE_COMMAND} -DGO=${PSTATE_GO} -DSOURCE=${PROJECT_SOURCE_DIR}
                 -DWORK=${PROJECT_BINARY_DIR}/bindings/go_outside -DPKG_CONFIG_DIR=${PROJECT_BINARY_DIR}/pkgconfig
                 -P ${CMAKE_CURRENT_LIST_DIR}/bindings_go_outside.cmake)
set_tests_properties(bindings_go_outside_tree PROPERTIES TIMEOUT 600)
# The same program against the prefix consumers_install made (tests/consumers/consumers.cmake), a
# directory the loader does not search, built with a cache of its own (cgo caches pkg-config's
# answers; README tells users `go build -a`).
include(GNUInstallDirs)
add_test(NAME consumer_go_installed
         COMMAND ${CMAKE_COMMAND} -DGO=${PSTATE_GO} -DSOURCE=${PROJECT_SOURCE_DIR} -DGO_FRESH_CACHE=ON
                 -DWORK=${PROJECT_BINARY_DIR}/bindings/go_installed
                 -DPKG_CONFIG_DIR=${PROJECT_BINARY_DIR}/tests/consumers_work/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig
                 -P ${CMAKE_CURRENT_LIST_DIR}/bindings_go_outside.cmake)
set_tests_properties(consumer_go_installed PROPERTIES TIMEOUT 600 FIXTURES_REQUIRED pstate_installed)
