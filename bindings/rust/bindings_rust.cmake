# bindings/rust/bindings_rust.cmake: the Rust binding's ctest declarations, beside the workspace
# whose tests they run; tests/CMakeLists.txt includes it.
#
# bindings_rust — the Rust binding (bindings/rust), `cargo test --offline` of the workspace:
#   pstate-sys: bindgen's layout tests, the initializer-macro equivalents, and the drift test
#               (regenerates src/bindings.rs with Debian's bindgen and compares)
#   pstate:     layout/errors, compile_fail doctests (Send/Sync/lifetime rules), and multi-rank
#               tests that relaunch the test binary with `pstate run -n 2|4`
#   bindings_rust_example: docs/bindings.md's example, pstate run -n 2 -- two_ranks, printing the
#               lines the docs show; bindings_rust_example_pipeline: the same for its requests
#               example (pipeline)
#   bindings_rust_doc: `cargo doc` of both crates (private items too) with RUSTDOCFLAGS=-D warnings:
#               a broken intra-doc link or an unescaped <tag> in a doc comment fails it
#   bindings_rust_consumer: a crate outside the tree with a plain `pstate = { path = ... }`
#               dependency builds and its binary runs without LD_LIBRARY_PATH
#               (bindings_rust_consumer.cmake)
include(${PROJECT_SOURCE_DIR}/bindings/env.cmake)
if(NOT TARGET pstate_rust)
  message(STATUS "bindings_rust tests not declared: the Rust binding is not built")
  return()
endif()
get_filename_component(_cargo_dir ${PSTATE_CARGO} DIRECTORY)
add_test(NAME bindings_rust
         COMMAND ${CMAKE_COMMAND} -E env ${PSTATE_RUST_ENV} "PATH=${_cargo_dir}:$ENV{PATH}"
                 "PSTATE_CLI=$<TARGET_FILE:pstate_cli>" "PSTATE_BUILD_DIR=${PROJECT_BINARY_DIR}" ${PSTATE_CARGO} test --offline
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/bindings/rust)
add_test(NAME bindings_rust_doc
         COMMAND ${CMAKE_COMMAND} -E env ${PSTATE_RUST_ENV} "PATH=${_cargo_dir}:$ENV{PATH}" "RUSTDOCFLAGS=-D warnings"
                 ${PSTATE_CARGO} doc --offline --no-deps --document-private-items
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/bindings/rust)
set_tests_properties(bindings_rust_doc PROPERTIES TIMEOUT 300)
# prints (exit 0) the line docs/bindings.md shows for rank 0; docs_listings checks the code listing
set(_rust_line "[0] rank 0/2 tp tp:0 ranks [0, 1]: all_reduce -> [3.0, 3.0, 3.0, 3.0], config model=llama max_tokens=128")
add_test(NAME bindings_rust_example
         COMMAND sh -c "out=$(\"$0\" run -n 2 -- \"$1\" 2>&1); rc=$?; echo \"$out\"; [ $rc = 0 ] && echo \"$out\" | grep -qxF \"$2\""
                 $<TARGET_FILE:pstate_cli> ${PROJECT_BINARY_DIR}/bindings/rust/target/debug/examples/two_ranks "${_rust_line}")
# the requests example (owned isend/irecv over steps, a scope): the line docs/bindings.md shows for stage 0
add_test(NAME bindings_rust_example_pipeline
         COMMAND sh -c "out=$(\"$0\" run -n 2 -- \"$1\" 2>&1); rc=$?; echo \"$out\"; [ $rc = 0 ] && echo \"$out\" | grep -qxF \"$2\""
                 $<TARGET_FILE:pstate_cli> ${PROJECT_BINARY_DIR}/bindings/rust/target/debug/examples/pipeline
                 "[0] stage 0/2: 3 steps of 1024 activations, swap [10, 11]")
set_tests_properties(bindings_rust PROPERTIES TIMEOUT 900)
set_tests_properties(bindings_rust_example bindings_rust_example_pipeline PROPERTIES TIMEOUT 300)
add_test(NAME bindings_rust_consumer
         COMMAND ${CMAKE_COMMAND} -DCARGO=${PSTATE_CARGO} -DSOURCE=${PROJECT_SOURCE_DIR}
                 -DWORK=${PROJECT_BINARY_DIR}/bindings/rust_consumer -DLIB_DIR=$<TARGET_FILE_DIR:pstate>
                 -P ${CMAKE_CURRENT_LIST_DIR}/bindings_rust_consumer.cmake)
set_tests_properties(bindings_rust_consumer PROPERTIES TIMEOUT 600)
