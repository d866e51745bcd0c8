# env.cmake — the binding toolchains and the environment each needs, shared by
# bindings/CMakeLists.txt (builds) and bindings/<language>/bindings_*.cmake (tests).
#
#   PSTATE_SWIG      swig >= 4.0, or empty
#   PSTATE_GO        go >= 1.18 (generics), or empty; Debian's golang-go may live in /usr/lib/go-1.19/bin
#   PSTATE_CARGO     cargo, or empty (rustup's ~/.cargo/bin is searched too)
#   PSTATE_BINDGEN   bindgen (Debian's `bindgen` package), or empty: needed only by the drift test
#   PSTATE_GO_ENV    VAR=value list for `cmake -E env`: pkg-config finds the built libpstate, offline
#   PSTATE_RUST_ENV  VAR=value list for `cmake -E env`: PSTATE_LIB_DIR, target dir in the build tree
option(PSTATE_BUILD_BINDINGS "Build the Python/Go/Rust bindings whose toolchains are found" ON)

set(PSTATE_SWIG "")
set(PSTATE_GO "")
set(PSTATE_CARGO "")
set(PSTATE_BINDGEN "")
if(NOT PSTATE_BUILD_BINDINGS)
  return()
endif()

find_program(PSTATE_SWIG_EXE NAMES swig4.0 swig)
if(PSTATE_SWIG_EXE)
  execute_process(COMMAND ${PSTATE_SWIG_EXE} -version OUTPUT_VARIABLE _swig_version)
  if(_swig_version MATCHES "SWIG Version ([0-9]+)" AND CMAKE_MATCH_1 GREATER_EQUAL 4)
    set(PSTATE_SWIG ${PSTATE_SWIG_EXE})
  endif()
endif()

# PSTATE_BUILD_GO / PSTATE_BUILD_RUST OFF leave a language out although its toolchain is here
# (the short-path install test builds only what is installed and packaged).
option(PSTATE_BUILD_GO "Build the Go binding when go >= 1.18 is found" ON)
option(PSTATE_BUILD_RUST "Build the Rust binding when cargo is found" ON)
find_program(PSTATE_GO_EXE go PATHS /usr/lib/go-1.19/bin /usr/lib/go/bin /usr/local/go/bin)
if(PSTATE_GO_EXE AND PSTATE_BUILD_GO)
  execute_process(COMMAND ${PSTATE_GO_EXE} env GOVERSION OUTPUT_VARIABLE _go_version OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_go_version MATCHES "^go1\\.([0-9]+)" AND CMAKE_MATCH_1 GREATER_EQUAL 18)
    set(PSTATE_GO ${PSTATE_GO_EXE})
  endif()
endif()

find_program(PSTATE_CARGO_EXE cargo HINTS $ENV{HOME}/.cargo/bin)
if(PSTATE_CARGO_EXE AND PSTATE_BUILD_RUST)
  set(PSTATE_CARGO ${PSTATE_CARGO_EXE})
endif()
find_program(PSTATE_BINDGEN_EXE bindgen)
if(PSTATE_BINDGEN_EXE)
  set(PSTATE_BINDGEN ${PSTATE_BINDGEN_EXE})
endif()

# The go tool needs gcc and pkg-config on PATH; `pkg-config pstate` finds the build tree's
# pstate.pc (header from the sources, libpstate here, with an rpath).
get_filename_component(_go_bin ${PSTATE_GO_EXE} DIRECTORY)
set(PSTATE_GO_ENV
    "PATH=${_go_bin}:$ENV{PATH}"
    "CGO_ENABLED=1"
    "PKG_CONFIG_PATH=${PROJECT_BINARY_DIR}/pkgconfig"
    "GOFLAGS=-mod=mod"
    "GOPROXY=off"
    "GOTOOLCHAIN=local"
    # the tests' failing ranks write flight-recorder dumps: into the build tree, not the sources
    "PSTATE_TRACE_DIR=${PROJECT_BINARY_DIR}/bindings/go/pstate-trace")
# Without HOME (some CI environments) the go tool has no default cache or GOPATH.
if(NOT DEFINED ENV{HOME} OR "$ENV{HOME}" STREQUAL "")
  list(APPEND PSTATE_GO_ENV "GOCACHE=${PROJECT_BINARY_DIR}/bindings/go/cache" "GOPATH=${PROJECT_BINARY_DIR}/bindings/go/path")
endif()
set(PSTATE_RUST_ENV
    "PSTATE_LIB_DIR=$<TARGET_FILE_DIR:pstate>"
    "CARGO_TARGET_DIR=${PROJECT_BINARY_DIR}/bindings/rust/target"
    "CARGO_NET_OFFLINE=true"
    "PSTATE_TRACE_DIR=${PROJECT_BINARY_DIR}/bindings/rust/pstate-trace")
