# bindings/rust/bindings_rust_consumer.cmake: a script run by bindings_rust_consumer (declared in
# bindings_rust.cmake beside it), never included.
#
# bindings_rust_consumer — the Rust crate as a user's project gets it (issue 18): a crate outside
# this tree whose only pstate dependency is `pstate = { path = ... }` (not pstate-sys, no build
# script of its own), built against the build tree as docs/bindings.md says (PSTATE_LIB_DIR), and
# its binary run without LD_LIBRARY_PATH: it must find libpstate.so.0 and run a world of one.
# Script mode (-P); bindings_rust.cmake declares it.
#   -DCARGO=... -DSOURCE=<repo> -DWORK=<scratch> -DLIB_DIR=<dir of libpstate.so>
if(NOT CMAKE_SCRIPT_MODE_FILE)  # a script only: the declaration is in bindings_rust.cmake
  return()
endif()
file(REMOVE_RECURSE ${WORK}/app)
file(MAKE_DIRECTORY ${WORK}/app/src)
file(WRITE ${WORK}/app/Cargo.toml "[package]\nname = \"pstate-consumer\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n"
                                  "[dependencies]\npstate = { path = \"${SOURCE}/bindings/rust/pstate\" }\n\n[workspace]\n")
file(WRITE ${WORK}/app/src/main.rs [=[
fn main() -> pstate::Result<()> {
    let store = std::env::args().nth(1).expect("store folder");
    let opts = pstate::InitOptions {
        world_size: Some(1),
        rank: Some(0),
        init_method: Some(format!("file://{store}")),
        ..Default::default()
    };
    let ps = pstate::PState::init(&opts)?;
    let mut x = [1.0f32, 2.0];
    ps.world()?.all_reduce(&mut x, pstate::ReduceOp::Sum)?;
    println!("consumer: rank {}/{} all_reduce -> {x:?}", ps.rank(), ps.world_size());
    ps.finalize()
}
]=])
get_filename_component(cargo_dir ${CARGO} DIRECTORY)
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH --unset=DEP_PSTATE_LIB_DIR --unset=RUSTFLAGS
                        "PATH=${cargo_dir}:$ENV{PATH}" "PSTATE_LIB_DIR=${LIB_DIR}" "CARGO_TARGET_DIR=${WORK}/target"
                        ${CARGO} build --offline --quiet
                WORKING_DIRECTORY ${WORK}/app RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cargo build of a crate depending on pstate by path failed (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${WORK}/target/debug/pstate-consumer ${WORK}/store
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "consumer: rank 0/1 all_reduce -> \\[1\\.0, 2\\.0\\]")
  message(FATAL_ERROR "the consumer's binary did not run (exit ${rc}):\n${out}\n${err}")
endif()
message(STATUS "${out}")
