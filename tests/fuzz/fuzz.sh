#!/usr/bin/env bash
# fuzz.sh — builds and runs the libFuzzer targets of tests/fuzz/ (clang from Debian).
#
#   tests/fuzz/fuzz.sh build                 clang++ -fsanitize=fuzzer,address,undefined binaries
#                                            in $FUZZ_DIR (default build-fuzz/)
#   tests/fuzz/fuzz.sh replay                every committed corpus input once (exit != 0 on a crash)
#   tests/fuzz/fuzz.sh run SECONDS [T...]    fuzz each target (default: all) for SECONDS, one after
#                                            the other (FUZZ_PARALLEL=N: N at a time); new inputs go
#                                            to $FUZZ_DIR/corpus/T, crashes to $FUZZ_DIR/crashes/
#   tests/fuzz/fuzz.sh merge [T...]          adds the inputs of $FUZZ_DIR/corpus/T that reach new
#                                            coverage to the committed tests/fuzz/corpus/T
#   tests/fuzz/fuzz.sh ci                    build, replay, then run ${FUZZ_SECONDS:-60} s of each
#
# Targets: wire (the store's frame decoder), init_method (init_method / MASTER_ADDR / MASTER_PORT
# parsers), launch_env (resolve_launch_env over a fixed environment), layout (validate + Layout).
# Each run prints libFuzzer's final line (executions, coverage, corpus size) and its log stays in
# $FUZZ_DIR/logs/. The committed corpus is only read by `run` (it is the second corpus folder),
# so CI never changes the checkout. Runs at nice 19 unless FUZZ_NICE=0.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FUZZ_DIR=${FUZZ_DIR:-$ROOT/build-fuzz}
CXX=${FUZZ_CXX:-clang++}
NICE=()
[ "${FUZZ_NICE:-1}" = 0 ] || NICE=(nice -n 19)
TARGETS=(wire init_method launch_env layout)

sources_of() {
  case "$1" in
    wire) echo src/bootstrap/wire.cpp ;;
    init_method) echo src/bootstrap/init_method.cpp ;;
    launch_env) echo src/bootstrap/launch_env.cpp src/bootstrap/init_method.cpp src/bootstrap/netif.cpp ;;
    layout) echo src/layout/layout.cpp src/layout/validate.cpp src/layout/vllm_layout.cpp src/api/api_common.cpp ;;
    *) echo "fuzz.sh: unknown target '$1' (known: ${TARGETS[*]})" >&2; exit 2 ;;
  esac
}

dict_of() { [ -f "$ROOT/tests/fuzz/$1.dict" ] && echo "-dict=$ROOT/tests/fuzz/$1.dict" || true; }

build_one() {
  local t=$1
  # shellcheck disable=SC2046
  (cd "$ROOT" && "${NICE[@]}" "$CXX" -std=c++20 -O1 -g -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -Iinclude -Isrc -Itests/fuzz "tests/fuzz/fuzz_$t.cpp" $(sources_of "$t") -o "$FUZZ_DIR/fuzz_$t") &&
    echo "fuzz.sh: built $FUZZ_DIR/fuzz_$t"
}

# FUZZ_PARALLEL targets are compiled at a time, as they are fuzzed.
build() {
  command -v "$CXX" >/dev/null || { echo "fuzz.sh: $CXX not found (apt-get install clang)" >&2; exit 2; }
  mkdir -p "$FUZZ_DIR"
  local parallel=${FUZZ_PARALLEL:-1} failed=0 pids=()
  for t in "${TARGETS[@]}"; do
    build_one "$t" &
    pids+=($!)
    if [ ${#pids[@]} -ge "$parallel" ]; then
      wait "${pids[0]}" || failed=1
      pids=("${pids[@]:1}")
    fi
  done
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  return $failed
}

replay() {
  local failed=0
  for t in "${TARGETS[@]}"; do
    if "$FUZZ_DIR/fuzz_$t" -runs=0 "$ROOT/tests/fuzz/corpus/$t" >"$FUZZ_DIR/replay_$t.log" 2>&1; then
      echo "fuzz.sh: replay $t: $(find "$ROOT/tests/fuzz/corpus/$t" -type f | wc -l) inputs ok"
    else
      echo "fuzz.sh: replay $t FAILED:"; tail -30 "$FUZZ_DIR/replay_$t.log"; failed=1
    fi
  done
  return $failed
}

run_one() {
  local t=$1 seconds=$2
  mkdir -p "$FUZZ_DIR/corpus/$t" "$FUZZ_DIR/crashes" "$FUZZ_DIR/logs"
  local log="$FUZZ_DIR/logs/$t-$(date +%Y%m%d-%H%M%S).log"
  # shellcheck disable=SC2046
  if "${NICE[@]}" "$FUZZ_DIR/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$FUZZ_DIR/crashes/$t-" $(dict_of "$t") \
      "$FUZZ_DIR/corpus/$t" "$ROOT/tests/fuzz/corpus/$t" >"$log" 2>&1; then
    echo "fuzz.sh: $t ${seconds}s clean: $(grep -E '^Done [0-9]+ runs' "$log" | tail -1);" \
      "$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*' "$log" | tail -1); corpus" \
      "$(find "$FUZZ_DIR/corpus/$t" -type f | wc -l) new + $(find "$ROOT/tests/fuzz/corpus/$t" -type f | wc -l) committed (log $log)"
  else
    echo "fuzz.sh: $t CRASHED (log $log):"; grep -A30 -E 'ERROR|property failed|deadly' "$log" | head -60
    return 1
  fi
}

run() {
  local seconds=$1; shift
  local targets=("$@")
  [ ${#targets[@]} -gt 0 ] || targets=("${TARGETS[@]}")
  local parallel=${FUZZ_PARALLEL:-1} failed=0 pids=()
  for t in "${targets[@]}"; do
    run_one "$t" "$seconds" &
    pids+=($!)
    if [ ${#pids[@]} -ge "$parallel" ]; then
      wait "${pids[0]}" || failed=1
      pids=("${pids[@]:1}")
    fi
  done
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  return $failed
}

merge() {
  local targets=("$@")
  [ ${#targets[@]} -gt 0 ] || targets=("${TARGETS[@]}")
  for t in "${targets[@]}"; do
    "$FUZZ_DIR/fuzz_$t" -merge=1 "$ROOT/tests/fuzz/corpus/$t" "$FUZZ_DIR/corpus/$t" >"$FUZZ_DIR/merge_$t.log" 2>&1
    echo "fuzz.sh: merge $t: $(find "$ROOT/tests/fuzz/corpus/$t" -type f | wc -l) committed inputs"
  done
}

case "${1:-}" in
  build) build ;;
  replay) replay ;;
  run) [ $# -ge 2 ] || { echo "usage: fuzz.sh run SECONDS [TARGET...]" >&2; exit 2; }; shift; run "$@" ;;
  merge) shift; merge "$@" ;;
  ci) build; replay; run "${FUZZ_SECONDS:-60}" ;;
  *) sed -n '2,20p' "$0" >&2; exit 2 ;;
esac
