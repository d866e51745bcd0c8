#!/usr/bin/env bash
# build.sh — the two commands of README.md, on a fresh Debian bookworm machine (as root):
#
#   ./build.sh main   installs what is missing, builds, and runs the demo (pstate run -n 4)
#   ./build.sh test   installs what is missing, builds, and runs every test (ctest)
#
# Other verbs: deps (install only), build (configure + build), install PREFIX, package (.deb
# files: libpstate1, libpstate-dev, pstate, python3-pstate in $BUILD_DIR), bench.
# BUILD_DIR (default build/), BUILD_TYPE (default Release), CMAKE_ARGS and CTEST_JOBS (tests at
# once; default: the CPUs, at most 4) are honoured.
set -euo pipefail
cd "$(dirname "$0")"
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

# Debian packages the build and the tests need (one list, so README and CI agree).
PACKAGES=(cmake g++ make pkg-config dpkg-dev libucx-dev ucx-utils libssl-dev libcmocka-dev
          python3 python3-numpy python3-pytest python3-torch python3-dev python3-pip python3-setuptools python3-wheel
          swig golang-go bindgen
          openmpi-bin libopenmpi-dev libgloo-dev gnuplot-nox clang iproute2 valgrind
          linux-perf  # perf stat in bench/across_hosts.sh (ucx-utils' ucx_perftest, openmpi-bin, python3-torch: its peers)
          abigail-tools  # abidw/abidiff: the ABI gate, abi/check.sh
          prometheus  # promtool check metrics: test_metrics checks pstate_metrics_text's exposition
          libcurl4-openssl-dev nlohmann-json3-dev etcd-server etcd-client  # the etcd store and its tests
          libmicrohttpd-dev)  # PSTATE_METRICS_ADDR: the per-rank /metrics endpoint

deps() {
  local missing=()
  # The Rust binding needs cargo: rustup's (~/.cargo/bin) when present, else Debian's.
  command -v cargo >/dev/null || [ -x "$HOME/.cargo/bin/cargo" ] || PACKAGES+=(cargo)
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "build.sh: installing ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

# The project's own commands build what is shipped (Release: -O3, as `./build.sh install` and the
# .deb packages carry it) with warnings as errors (GCC 12 on bookworm is the known compiler; a
# plain `cmake` leaves PSTATE_WERROR off, so another compiler's new warning never stops a user).
build() {
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" -DPSTATE_WERROR=ON ${CMAKE_ARGS:-} >/dev/null
  cmake --build "$BUILD_DIR" -j "$JOBS"
}

case "${1:-}" in
  deps) deps ;;
  build) deps; build ;;
  main)
    deps; build
    "$BUILD_DIR/pstate" run -n 4 -- "$BUILD_DIR/serving_step_demo"
    ;;
  test)
    deps; build
    # One test per CPU at once, at most 4 (CTEST_JOBS overrides): most tests wait on peers and
    # deadlines (one at a time, the suite kept ~0.8 of a CPU busy); the CPU-bound ones run alone
    # (RUN_SERIAL: the two matrices, abi_gate_variants, packages_deb, the multi-host tests).
    cd "$BUILD_DIR" && ctest --output-on-failure -j "${CTEST_JOBS:-$(jobs=$(nproc); echo $((jobs < 4 ? jobs : 4)))}" --timeout 900
    ;;
  bench)
    deps; build
    bench/run.sh
    ;;
  install)
    deps; build
    cmake --install "$BUILD_DIR" --prefix "${2:-/usr/local}"
    ldconfig 2>/dev/null || true  # the new libpstate.so.1 into the loader's cache
    ;;
  package)
    deps; build
    (cd "$BUILD_DIR" && cpack -G DEB)
    ls "$BUILD_DIR"/*.deb
    ;;
  *)
    echo "usage: ./build.sh main|test|deps|build|bench|package|install [PREFIX]" >&2
    exit 2
    ;;
esac
