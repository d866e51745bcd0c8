#!/usr/bin/env bash
# tests/gpu/run.sh — the GPU check of pstate's CUDA backend, for a machine with NVIDIA GPUs.
#
# Not part of CI (CI has no GPU). It:
#   1. finds the CUDA toolkit ($CUDA_HOME, default /usr/local/cuda) and NCCL: the toolkit's
#      nccl.h, else the Python package nvidia-nccl-cu13 (then PSTATE_NCCL_LIBRARY points pstate
#      at its libnccl.so.2);
#   2. builds libpstate with the CUDA backend (-DCMAKE_CUDA_ARCHITECTURES=90; tests off) into
#      $BUILD_DIR (default build-gpu/);
#   3. builds the GPU programs of tests/gpu/ with g++ against that build:
#        device_comm_check  the backend below the C API, N ranks as N threads;
#        gpu_api_check      the public C API with CUDA contexts, one process per GPU (only
#                           compiled when CMake cannot build libpstate, e.g. without UCX);
#        gpu_multi_check    the public C API with several ranks (tests/gpu/ranks_per_gpu.sh);
#        gpu_mem_check      group memory and registered buffers (issue 29: pstate_mem_*,
#                           symmetric windows or their fallback, the pool, graph registration);
#   4. runs each at world 1 and at world = the GPU count when there are several GPUs (threads;
#      `pstate run -n N` for the API check), and collects the cost tables in $OUT; gpu_mem_check
#      at world 1 and at world 2 on device 0 with an NCCL host id per rank (own_host_id.sh; NCCL
#      may refuse symmetric windows there, which the check accepts: results exact either way);
#   5. with --ranks-per-gpu: world 2 and 4 on ONE GPU, each rank an NCCL host of its own over
#      loopback sockets (tests/gpu/ranks_per_gpu.sh; semantics, not speed): every device
#      collective on world, tp and a custom group, p2p, dicts, a replayed graph, a SIGKILLed rank
#      and pstate_shrink, a stalled rank named by `pstate doctor`, PSTATE_CHECK mismatches.
# Every check compares device results with a host reference; see tests/gpu/gpu_check.hpp.
# Whole run: under 5 minutes on one H200, about 8 with --ranks-per-gpu (every step has its own
# timeout: at most 240 s of build, 300 s of compiling, 90 + 60 s of world 1 and 480 s of ranks).
#
#   tests/gpu/run.sh                  build and run; exit status 0 when every check passed
#   tests/gpu/run.sh --compile-only   build only (what a machine without a GPU can do)
#   tests/gpu/run.sh --devsim         build and run the same programs on the host-memory CUDA
#                                     runtime and NCCL stand-ins of tests/devsim/ (no GPU needed;
#                                     proves the script and the checks end to end, never speed)
#   tests/gpu/run.sh --ranks-per-gpu  also world 2 and 4 on one GPU (step 5); with --devsim too
set -euo pipefail
cd "$(dirname "$0")/../.."

COMPILE_ONLY=0
DEVSIM=0
RANKS_PER_GPU=0
for arg in "$@"; do
  case "$arg" in
    --compile-only) COMPILE_ONLY=1 ;;
    --devsim) DEVSIM=1 ;;
    --ranks-per-gpu) RANKS_PER_GPU=1 ;;
    *) echo "usage: tests/gpu/run.sh [--compile-only] [--devsim] [--ranks-per-gpu]" >&2; exit 2 ;;
  esac
done
BUILD=$(realpath -m "${BUILD_DIR:-$([ "$DEVSIM" = 1 ] && echo build-devsim || echo build-gpu)}")
OUT=${OUT:-$BUILD/out}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
JOBS=${JOBS:-$(nproc)}
CXX=${CXX:-g++}
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}  # NCCL's bootstrap stays on loopback
mkdir -p "$OUT" "$BUILD/gpu"
log() { echo "run.sh: $*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

# ---- 1. CUDA toolkit and NCCL -------------------------------------------------------------------
[ -f "$CUDA_HOME/include/cuda_runtime_api.h" ] || fail "no CUDA toolkit at CUDA_HOME=$CUDA_HOME"
CUDA_LIB=$CUDA_HOME/lib64
[ -d "$CUDA_LIB" ] || CUDA_LIB=$CUDA_HOME/lib
NCCL_INC=$CUDA_HOME/include
NCCL_LIB=$CUDA_LIB
if [ ! -f "$NCCL_INC/nccl.h" ]; then
  pkg=$(python3 - <<'EOF' 2>/dev/null || true
import importlib.util
spec = importlib.util.find_spec("nvidia.nccl")
print(list(spec.submodule_search_locations)[0] if spec else "")
EOF
)
  [ -n "$pkg" ] && [ -f "$pkg/include/nccl.h" ] || fail "no nccl.h in $CUDA_HOME/include and no Python nvidia-nccl-cu13 (pip install nvidia-nccl-cu13)"
  NCCL_INC=$pkg/include
  NCCL_LIB=$pkg/lib
  export NCCL_HOME=$pkg                               # CMakeLists.txt looks there for nccl.h
  export PSTATE_NCCL_LIBRARY=$pkg/lib/libnccl.so.2    # and pstate loads this one at run time
  log "NCCL from the Python package at $pkg"
fi
log "CUDA toolkit $CUDA_HOME, NCCL headers $NCCL_INC"

# ---- 2. libpstate with the CUDA backend -----------------------------------------------------------
# pstate has no CUDA kernels today (NCCL runs them); the architecture is set for any that come.
# Warnings are not errors here (CI enforces them; a GPU machine's compiler may differ), and the
# build type is the project's default (GCC 12 at -O3 warns falsely in src/common/log.cpp).
LIBPSTATE_BUILT=0
if command -v cmake >/dev/null &&
   cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 -DPSTATE_BUILD_TESTS=OFF \
         -DPSTATE_WERROR=OFF \
         -DCUDAToolkit_ROOT="$CUDA_HOME" >"$BUILD/cmake.log" 2>&1; then
  grep -q "CUDA/NCCL backend ON" "$BUILD/cmake.log" || fail "CMake did not enable the CUDA backend (see $BUILD/cmake.log)"
  targets="pstate pstate_internal"
  grep -q "pstate_cli" "$BUILD/Makefile" 2>/dev/null && targets="$targets pstate_cli"
  timeout "${BUILD_TIMEOUT:-$([ "$DEVSIM" = 1 ] && echo 1200 || echo 240)}" cmake --build "$BUILD" -j "$JOBS" --target $targets >"$BUILD/build.log" 2>&1 ||
    fail "building libpstate (see $BUILD/build.log)"
  LIBPSTATE_BUILT=1
else
  log "CMake configure failed (see $BUILD/cmake.log; UCX is required for libpstate): building the backend check from sources"
fi

# ---- 3. the GPU programs --------------------------------------------------------------------------
FLAGS=(-std=c++20 -O2 -Wall -Wextra -Wno-unused-parameter -Iinclude -Isrc -Itests/gpu -I"$CUDA_HOME/include" -I"$NCCL_INC")
LIBS=(-L"$CUDA_LIB" -L"$NCCL_LIB" -Wl,-rpath,"$CUDA_LIB" -Wl,-rpath,"$NCCL_LIB" -lcudart -l:libnccl.so.2 -ldl -lpthread)
if [ "$DEVSIM" = 1 ]; then
  # The stand-ins, built from tests/devsim/ (as ctest builds them), replace libcudart and NCCL:
  # the programs link them, and libpstate finds them through its documented overrides.
  DEVSIM_DIR=$BUILD/devsim
  mkdir -p "$DEVSIM_DIR"
  DS_FLAGS=(-std=c++20 -O2 -fPIC -shared -fvisibility=hidden -Wall -Wextra -Itests/devsim -I"$CUDA_HOME/include" -I"$NCCL_INC")
  $CXX "${DS_FLAGS[@]}" tests/devsim/devsim_cudart.cpp -Wl,-soname,libpstate_devsim_cudart.so -ldl -lpthread \
    -o "$DEVSIM_DIR/libpstate_devsim_cudart.so" || fail "building the CUDA runtime stand-in"
  $CXX "${DS_FLAGS[@]}" tests/devsim/devsim_driver.cpp -L"$DEVSIM_DIR" -Wl,-rpath,'$ORIGIN' -lpstate_devsim_cudart \
    -o "$DEVSIM_DIR/libcuda.so.1" || fail "building the driver stand-in"
  $CXX "${DS_FLAGS[@]}" tests/devsim/devsim_nccl.cpp -Wl,-soname,libpstate_devsim_nccl.so -L"$DEVSIM_DIR" \
    -Wl,-rpath,'$ORIGIN' -lpstate_devsim_cudart -lpthread -lrt -o "$DEVSIM_DIR/libpstate_devsim_nccl.so" ||
    fail "building the NCCL stand-in"
  export PSTATE_CUDA_RUNTIME_LIBRARY=$DEVSIM_DIR/libpstate_devsim_cudart.so
  export PSTATE_NCCL_LIBRARY=$DEVSIM_DIR/libpstate_devsim_nccl.so
  LIBS=(-L"$DEVSIM_DIR" -Wl,-rpath,"$DEVSIM_DIR" -lpstate_devsim_cudart -lpstate_devsim_nccl -ldl -lpthread)
  # The stand-ins time nothing that matters: a short bench (8 B and 1 MiB, 10 calls) keeps the run short.
  export GPU_CHECK_BENCH_MAX_BYTES=${GPU_CHECK_BENCH_MAX_BYTES:-1048576} GPU_CHECK_BENCH_ITERS=${GPU_CHECK_BENCH_ITERS:-10}
  log "devsim: stand-ins in $DEVSIM_DIR (PSTATE_CUDA_RUNTIME_LIBRARY, PSTATE_NCCL_LIBRARY)"
fi
if [ "$LIBPSTATE_BUILT" = 1 ]; then
  backend=("$BUILD/libpstate_internal.a")
  pkg-config --exists ucx 2>/dev/null && LIBS+=($(pkg-config --libs ucx))
else
  # The backend and what it uses, without UCX: enough for device_comm_check.
  backend=(src/transport/nccl/*.cpp src/common/*.cpp src/api/api_common.cpp)
fi
timeout 300 $CXX "${FLAGS[@]}" -DPSTATE_HAVE_CUDA=1 tests/gpu/device_comm_check.cpp "${backend[@]}" "${LIBS[@]}" \
  -o "$BUILD/gpu/device_comm_check" || fail "compiling device_comm_check"
log "built $BUILD/gpu/device_comm_check"

API_CHECK=0
if [ "$LIBPSTATE_BUILT" = 1 ] && nm -D --defined-only "$BUILD/libpstate.so" | grep -q " pstate_init@"; then
  for p in gpu_api_check gpu_multi_check gpu_mem_check; do  # the programs of the C API, compiled side by side
    timeout 300 $CXX "${FLAGS[@]}" "tests/gpu/$p.cpp" -L"$BUILD" -Wl,-rpath,"$BUILD" -lpstate "${LIBS[@]}" \
      -o "$BUILD/gpu/$p" >"$BUILD/gpu/$p.build.log" 2>&1 &
  done
  for p in gpu_api_check gpu_multi_check gpu_mem_check; do
    wait -n || { cat "$BUILD"/gpu/*.build.log >&2; fail "compiling the C API programs"; }
  done
  API_CHECK=1
  log "built $BUILD/gpu/gpu_api_check, $BUILD/gpu/gpu_multi_check, $BUILD/gpu/gpu_mem_check"
else
  for p in gpu_api_check gpu_multi_check gpu_mem_check; do
    $CXX "${FLAGS[@]}" -c "tests/gpu/$p.cpp" -o "$BUILD/gpu/$p.o" || fail "compiling $p"
  done
  log "gpu_api_check, gpu_multi_check and gpu_mem_check compile; not linked: libpstate was not built (see above)"
fi
[ "$COMPILE_ONLY" = 1 ] && { log "compile only: done"; exit 0; }

# ---- 4. run -----------------------------------------------------------------------------------------
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${NGPU:-0}" -ge 1 ] || NGPU=1
[ "$DEVSIM" = 1 ] && NGPU=${DEVSIM_RANKS:-4}  # the stand-in shows 8 devices; 4 ranks fit 2 cores
log "$NGPU GPU(s); results in $OUT"
status=0
step() {  # step NAME SECONDS COMMAND...: runs with a timeout, output also in $OUT/NAME.log
  local name=$1 seconds=$2
  shift 2
  log "== $name"
  if timeout --kill-after=10 "$seconds" "$@" 2>&1 | tee "$OUT/$name.log"; then log "ok: $name"; else
    log "FAILED: $name (status ${PIPESTATUS[0]}, log $OUT/$name.log)"
    status=1
  fi
}
step device_comm_check_w1 90 "$BUILD/gpu/device_comm_check" 1 "$OUT"
[ "$NGPU" -gt 1 ] && step "device_comm_check_w$NGPU" 120 "$BUILD/gpu/device_comm_check" "$NGPU" "$OUT"
if [ "$API_CHECK" = 1 ]; then
  step gpu_api_check_w1 60 "$BUILD/gpu/gpu_api_check" "$OUT"
  if [ "$NGPU" -gt 1 ] && [ -x "$BUILD/pstate" ]; then
    step "gpu_api_check_w$NGPU" 90 "$BUILD/pstate" run -n "$NGPU" "$BUILD/gpu/gpu_api_check" "$OUT"
  fi
  # group memory (issue 29): world 1, and world 2 on device 0, each rank an NCCL host of its own
  step gpu_mem_check_w1 60 "$BUILD/gpu/gpu_mem_check"
  if [ -x "$BUILD/pstate" ]; then
    step gpu_mem_check_w2 90 "$BUILD/pstate" run -n 2 tests/gpu/own_host_id.sh "$BUILD/gpu/gpu_mem_check"
  fi
fi
# ---- 5. several ranks on one GPU ----------------------------------------------------------------------
if [ "$RANKS_PER_GPU" = 1 ]; then
  if [ "$API_CHECK" = 1 ] && [ -x "$BUILD/pstate" ]; then
    # the stand-ins need no slack for NCCL's start-up: a 3 s timeout keeps the stall step short
    [ "$DEVSIM" = 1 ] && export FAULT_TIMEOUT_MS=${FAULT_TIMEOUT_MS:-3000}
    # several processes on one GPU need its compute mode Default (not Exclusive_Process)
    [ "$DEVSIM" = 1 ] || log "GPU 0 compute mode: $(nvidia-smi -i 0 --query-gpu=compute_mode --format=csv,noheader 2>&1 | head -1)"
    step ranks_per_gpu 480 tests/gpu/ranks_per_gpu.sh "$BUILD/pstate" "$BUILD/gpu/gpu_multi_check" "$OUT"
  else
    log "FAILED: --ranks-per-gpu needs libpstate and the pstate command (see above)"
    status=1
  fi
fi

{
  if [ "$DEVSIM" = 1 ]; then
    echo "# pstate GPU check on the devsim stand-ins (no GPU), $(date -u +%Y-%m-%d)"
    echo
    echo "Host-memory stand-ins of the CUDA runtime and NCCL: the timings below measure nothing about GPUs."
  else
    echo "# pstate GPU check, $(date -u +%Y-%m-%d), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  fi
  echo
  for f in "$OUT"/*_bench_w*.md; do [ -f "$f" ] && { cat "$f"; echo; }; done
  for w in 1 2; do  # group memory: which path NCCL gave, and the count of exact checks
    if [ -f "$OUT/gpu_mem_check_w$w.log" ]; then grep -h 'gpu_mem_check:' "$OUT/gpu_mem_check_w$w.log" || true; echo; fi
  done
  if [ "$RANKS_PER_GPU" = 1 ] && [ -f "$OUT/ranks_per_gpu.md" ]; then
    echo "Several ranks on one GPU (tests/gpu/ranks_per_gpu.sh: an NCCL host per rank, loopback sockets; semantics, not speed):"
    echo
    cat "$OUT/ranks_per_gpu.md"
    echo
  fi
} >"$OUT/summary.md"
cat "$OUT/summary.md"
[ "$status" = 0 ] && log "all GPU checks passed" || log "some GPU checks FAILED"
exit $status
