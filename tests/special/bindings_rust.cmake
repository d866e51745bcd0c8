# bindings_rust — the Rust binding (bindings/rust), `cargo test --offline` of the workspace:
#   pstate-sys: bindgen's layout tests, the initializer-macro equivalents, and the drift test
#               (regenerates src/bindings.rs with Debian's bindgen and compares)
#   pstate:     layout/errors, compile_fail doctests (Send/Sync/lifetime rules), and multi-rank
#               tests that relaunch the test binary with `pstate run -n 2|4`
include(${PROJECT_SOURCE_DIR}/bindings/env.cmake)
if(NOT TARGET pstate_rust)
  message(STATUS "bindings_rust tests not declared: the Rust binding is not built")
  return()
endif()
get_filename_component(_cargo_dir ${PSTATE_CARGO} DIRECTORY)
add_test(NAME bindings_rust
         COMMAND ${CMAKE_COMMAND} -E env ${PSTATE_RUST_ENV} "PATH=${_cargo_dir}:$ENV{PATH}"
                 "PSTATE_CLI=$<TARGET_FILE:pstate_cli>" ${PSTATE_CARGO} test --offline
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/bindings/rust)
set_tests_properties(bindings_rust PROPERTIES TIMEOUT 900)
