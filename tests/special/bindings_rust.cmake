# bindings_rust — the Rust binding (bindings/rust), `cargo test --offline` of the workspace:
#   pstate-sys: bindgen's layout tests, the initializer-macro equivalents, and the drift test
#               (regenerates src/bindings.rs with Debian's bindgen and compares)
#   pstate:     layout/errors, compile_fail doctests (Send/Sync/lifetime rules), and multi-rank
#               tests that relaunch the test binary with `pstate run -n 2|4`
#   bindings_rust_example: docs/bindings.md's example, pstate run -n 2 -- two_ranks
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
add_test(NAME bindings_rust_example
         COMMAND $<TARGET_FILE:pstate_cli> run -n 2 -- ${PROJECT_BINARY_DIR}/bindings/rust/target/debug/examples/two_ranks)
set_tests_properties(bindings_rust PROPERTIES TIMEOUT 900)
set_tests_properties(bindings_rust_example PROPERTIES TIMEOUT 300)
