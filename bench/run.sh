#!/usr/bin/env bash
# bench/run.sh — pstate against Open MPI (and gloo) on this machine, in one session, and
# docs/bench/collectives.md (BENCHMARKS.md quotes its current figures).
#
#   bench/run.sh [--quick]
#   bench/run.sh --cases NAME[,NAME...]   re-measure only those cases (e.g. all_gatherv.2,sendrecv.2),
#                                         keeping every other case's results, then rewrite the report
#
# Builds what it needs (the `pstate` command in $BUILD_DIR, default build/; bench/mpi_bench.c
# with mpicc; bench/gloo_bench.cc with g++ and Debian's libgloo-dev, skipped with a warning where
# it does not build; bench/memcpy_bw.c; bench/handoff_floor.c), then measures each case REPEATS times
# (default 5), MPI then pstate alternately, so both see the same machine load (report.py takes,
# per size, the median of the repeats' medians, and for pstate/MPI the median of the quotients of
# the runs made back to back):
#   - single-core memcpy bandwidth of 64 MiB (the physical reference for large sizes)
#   - the minimal 2-rank all_reduce of 8 B..1 KiB (bench/handoff_floor.c, ranks bound, REPEATS
#     times, and once more before each repeat of the 2-rank all_reduce cases: the physical
#     reference for small sizes, in the same minute as the repeat it is compared with)
#   - 2 ranks: all_reduce 8 B..64 MiB; all_gather, reduce_scatter, broadcast 8 B..16 MiB;
#     all_to_all and send_recv 8 B..16 MiB (x4 steps). all_reduce, all_gather and broadcast also
#     run gloo (torch's CPU backend, what SGLang's CPU groups use) right after pstate in each
#     repeat: `gloo_bench -n 2`, which forks its 2 ranks itself (TCP on 127.0.0.1, file-store
#     rendezvous; see its head comment). gloo takes ~200 us at 8 B and ~19 ms at 16 MiB here, so
#     its timed calls per size are capped at GLOO_BUDGET_MS (default 150 ms) of wall time, at
#     least 10 calls (the same median rule, fewer calls): 5 s (all_gather, broadcast) to 10 s
#     (all_reduce to 64 MiB) per gloo run, about 1.6 min added to the whole bench
#   - the same 2-rank all_reduce, all_gather, reduce_scatter, broadcast with every rank bound to
#     its own core on both sides (a scheduler that puts both ranks on one core costs pstate's
#     yielding waits microseconds per hand-off; see bench/analysis.md)
#   - 4 ranks on the 2 cores (oversubscribed): all_reduce 8 B..1 MiB
#   - 4 ranks: broadcast_object 64 B..64 KiB from rank 0 to 3 readers vs MPI_Bcast of the bytes
#   - 2 ranks: all_gatherv 8 B..16 MiB (uneven parts, 1:2) vs MPI_Allgatherv, and sendrecv 8 B..16
#     MiB (x4 steps: both ranks isend + irecv + wait, a ring) vs MPI_Isend/MPI_Irecv/MPI_Waitall
#   - start-up of 8 ranks to model parallel initialized (tp 4 x pp 2) and finalized, whole
#     processes, vs `mpirun -np 8` of MPI_Init + MPI_Barrier + MPI_Finalize (median wall time of 5 runs each,
#     alternating)
# and finally runs bench/report.py, which writes docs/bench/collectives.md (tables, ratios, targets),
# docs/bench/startup.md and bench/results/time_vs_size.png (gnuplot). The per-repeat JSON, the logs
# and the binaries stay in bench/results/, git-ignored; report.py folds the JSON into
# bench/results/rounds.json, which is committed.
#
# Open MPI runs with its fastest shared-memory path here: --mca pml ob1 --mca btl self,vader;
# oversubscribed runs add --oversubscribe --mca mpi_yield_when_idle 1. Ranks are not bound to
# cores on either side in the main cases (--bind-to none; `pstate run --no-bind`), so both
# get the same scheduler; MPI_BIND=core changes that for MPI. The ".bound" cases bind both. --quick runs a few sizes only (a smoke test of
# this script, not a measurement, written under $BUILD_DIR/bench-quick/). Before measuring it
# waits up to QUIET_WAIT_S for the load average to drop below QUIET_LOAD. Every command is
# bounded by `timeout` (CASE_TIMEOUT seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build}
CASE_TIMEOUT=${CASE_TIMEOUT:-240}
MPI_BIND=${MPI_BIND:-none}
QUICK=0
ONLY=""  # --cases: the case names to re-measure, comma-separated
[ "${1:-}" = "--quick" ] && QUICK=1
if [ "${1:-}" = "--cases" ]; then
  ONLY=",${2:?--cases needs NAME[,NAME...]},"
fi
REPEATS=${REPEATS:-$([ "$QUICK" = 1 ] && echo 1 || echo 5)}
if [ "$QUICK" = 1 ]; then  # a smoke test never overwrites the real results
  RESULTS=${RESULTS:-$ROOT/$BUILD_DIR/bench-quick}
  REPORT=$RESULTS  # its collectives.md and startup.md
else
  RESULTS=${RESULTS:-$ROOT/bench/results}
  REPORT=$ROOT/docs/bench  # collectives.md and startup.md
fi

log() { echo "bench/run.sh: $*" >&2; }
MACHINE_TXT=$RESULTS/machine.txt  # the full run's machine; --cases writes partial-NAME.txt instead

# ---- build ------------------------------------------------------------------------------------
build() {
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  fi
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target pstate_cli >/dev/null
  mkdir -p "$RESULTS/bin"
  mpicc -O2 -Wall -Wextra -I src/cli bench/mpi_bench.c -o "$RESULTS/bin/mpi_bench"
  cc -O2 -Wall -Wextra -I src/cli bench/memcpy_bw.c -o "$RESULTS/bin/memcpy_bw"
  cc -O2 -Wall -Wextra -I src/cli bench/handoff_floor.c -o "$RESULTS/bin/handoff_floor"
  if ! g++ -O2 -std=c++17 -Wall -Wextra -I src/cli bench/gloo_bench.cc -o "$GLOO_BENCH" -lgloo -lpthread; then
    log "bench/gloo_bench.cc does not build (libgloo-dev missing?): no gloo runs"
    rm -f "$GLOO_BENCH"
  fi
}

PSTATE="$ROOT/$BUILD_DIR/pstate"
MPI_BENCH="$RESULTS/bin/mpi_bench"
GLOO_BENCH="$RESULTS/bin/gloo_bench"
GLOO_CASES=" all_reduce.2 all_gather.2 broadcast.2 "  # the plain 2-rank cases gloo joins
GLOO_BUDGET_MS=${GLOO_BUDGET_MS:-150}
MPIRUN=(mpirun --allow-run-as-root --bind-to "$MPI_BIND" --mca pml ob1 --mca btl self,vader)
MPIRUN_BOUND=(mpirun --allow-run-as-root --bind-to core --mca pml ob1 --mca btl self,vader)
MPIRUN_OVER=("${MPIRUN[@]}" --oversubscribe --mca mpi_yield_when_idle 1)

# Runs a command under `timeout`, its output appended to the case log; a failure is recorded in
# failures.txt and does not stop the other cases.
run_case() {
  local name=$1
  shift
  echo "\$ $(printf '%q ' "$@")" >>"$RESULTS/logs/$name.log"
  if ! timeout --kill-after=10 "$CASE_TIMEOUT" "$@" >>"$RESULTS/logs/$name.log" 2>&1; then
    log "FAILED: $name (see bench/results/logs/$name.log)"
    echo "$name" >>"$RESULTS/failures.txt"
    return 0
  fi
  log "done: $name"
}

# pair MODE NAME RANKS BENCH-ARGS...: REPEATS times, the MPI run then the pstate run, same
# arguments, then for the cases in GLOO_CASES the gloo run (after pstate, so that MPI and pstate
# stay back to back and pstate/gloo are too). MODE plain: neither side binds; over:
# oversubscribed (MPI yields when idle); bound: every rank on its own core on both sides (MPI
# --bind-to core, pstate run --bind-cores).
pair() {
  local mode=$1 name=$2 ranks=$3 rep
  shift 3
  if [ -n "$ONLY" ] && [[ $ONLY != *",$name,"* ]]; then return 0; fi
  local mpirun=("${MPIRUN[@]}") launcher=("$PSTATE" run --no-bind)
  [ "$mode" = over ] && mpirun=("${MPIRUN_OVER[@]}")
  [ "$mode" = bound ] && mpirun=("${MPIRUN_BOUND[@]}") && launcher=("$PSTATE" run --bind-cores)
  for rep in $(seq 1 "$REPEATS"); do
    # The 2-rank all_reduce cases also measure the minimal implementation in the same minute, so
    # that each repeat can be judged against what the machine allowed right then.
    case $name in all_reduce.2*)
      run_case "$name.floor" "$RESULTS/bin/handoff_floor" --bind -b 8 -e 1K --json "$RESULTS/$name.floor.$rep.json" ;;
    esac
    run_case "$name.mpi" "${mpirun[@]}" -np "$ranks" "$MPI_BENCH" "$@" --check --json "$RESULTS/$name.mpi.$rep.json"
    run_case "$name.pstate" "${launcher[@]}" -n "$ranks" -- "$PSTATE" bench "$@" --check \
      --json "$RESULTS/$name.pstate.$rep.json"
    if [ -x "$GLOO_BENCH" ] && [[ $GLOO_CASES == *" $name "* ]]; then
      run_case "$name.gloo" "$GLOO_BENCH" -n "$ranks" "$@" --budget-ms "$GLOO_BUDGET_MS" --check \
        --json "$RESULTS/$name.gloo.$rep.json"
    fi
  done
}

# Wall time in ms of one run of a command (whole processes, launcher included); "null" when it
# fails.
wall_ms() {
  local t0 t1
  echo "\$ $(printf '%q ' "$@")" >>"$RESULTS/logs/startup.log"
  t0=$(date +%s%N)
  if ! timeout --kill-after=10 "$CASE_TIMEOUT" "$@" >>"$RESULTS/logs/startup.log" 2>&1; then
    log "FAILED: startup (see bench/results/logs/startup.log)"
    echo "startup" >>"$RESULTS/failures.txt"
    echo null
    return
  fi
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000000))
}

median() { printf '%s\n' "$@" | grep -v null | sort -n | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "null"}'; }

# Start-up of 8 ranks, 5 times each side, alternating so both see the same load.
startup() {
  local mpi=() ps=() i
  for i in 1 2 3 4 5; do
    mpi+=("$(wall_ms "${MPIRUN_OVER[@]}" -np 8 "$MPI_BENCH" --op startup)")
    ps+=("$(wall_ms "$PSTATE" run -n 8 -- "$PSTATE" bench --op startup --tp 4 --pp 2)")
  done
  local mpi_ms pstate_ms
  mpi_ms=$(median "${mpi[@]}")
  pstate_ms=$(median "${ps[@]}")
  printf '{"ranks": 8, "runs": 5, "mpi_ms": %s, "pstate_ms": %s, "mpi_runs_ms": [%s], "pstate_runs_ms": [%s]}\n' \
    "$mpi_ms" "$pstate_ms" "$(IFS=,; echo "${mpi[*]}")" "$(IFS=,; echo "${ps[*]}")" >"$RESULTS/startup.json"
  log "done: startup (MPI $mpi_ms ms, pstate $pstate_ms ms)"
}

machine() {
  {
    echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "nproc=$(nproc)"
    echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo "kernel=$(uname -r)"
    echo "mem=$(free -g | awk '/Mem:/ {print $2 " GiB"}')"
    echo "openmpi=$(mpirun --version 2>/dev/null | head -1)"
    if [ -x "$GLOO_BENCH" ]; then
      echo "gloo=libgloo $(dpkg-query -W -f '${Version}' libgloo-dev 2>/dev/null || echo '?')"
      echo "gloo_budget_ms=$GLOO_BUDGET_MS"
    fi
    echo "pstate=$("$PSTATE" --version)"
    echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo '+dirty')"
    echo "build_type=$(grep -m1 CMAKE_BUILD_TYPE: "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2)"
    echo "mpi_bind=$MPI_BIND"
    echo "quick=$QUICK"
    echo "repeats=$REPEATS"
  } >"$RESULTS/machine.txt"
}

# Waits (at most QUIET_WAIT_S, default 60 s) for the 1-minute load average to fall below
# QUIET_LOAD (default 1.0): this machine is shared, and a build next door halves anyone's numbers.
wait_quiet() {
  local limit=$((SECONDS + ${QUIET_WAIT_S:-60})) load
  while :; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    if awk -v l="$load" -v q="${QUIET_LOAD:-1.0}" 'BEGIN { exit !(l < q) }'; then
      echo "quiet=yes (load $load)" >>"$MACHINE_TXT"
      return
    fi
    if [ $SECONDS -ge $limit ]; then
      log "machine still busy (load $load); measuring anyway"
      echo "quiet=no (load $load after waiting ${QUIET_WAIT_S:-60} s)" >>"$MACHINE_TXT"
      return
    fi
    sleep 5
  done
}

# --cases: only the named pairs, every other result kept; partial-NAME.txt says when and where
# they were measured (bench/report.py prints it next to the machine of the full run).
partial() {
  local t_start=$SECONDS name
  build
  mkdir -p "$RESULTS/logs"
  MACHINE_TXT=$(mktemp)
  wait_quiet
  export PSTATE_TIMEOUT_MS=${PSTATE_TIMEOUT_MS:-60000}
  cases
  for name in ${ONLY//,/ }; do
    {
      echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
      echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo '+dirty')"
      echo "repeats=$REPEATS"
      cat "$MACHINE_TXT"
      echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)"
    } >"$RESULTS/partial-$name.txt"
  done
  rm -f "$MACHINE_TXT"
  python3 bench/report.py "$RESULTS" "$REPORT"
  log "re-measured ${ONLY//,/ } and wrote $REPORT/collectives.md in $((SECONDS - t_start)) s"
}

# Every case of the full run (pair skips those --cases does not name).
cases() {
  pair plain all_reduce.2 2 --op all_reduce -b 8 -e 64M -f 2
  for op in all_gather reduce_scatter broadcast; do
    pair plain "$op.2" 2 --op "$op" -b 8 -e 16M -f 2
  done
  for op in all_to_all send_recv; do
    pair plain "$op.2" 2 --op "$op" -b 8 -e 16M -f 4
  done
  pair plain all_gatherv.2 2 --op all_gatherv -b 8 -e 16M -f 4
  pair plain sendrecv.2 2 --op sendrecv -b 8 -e 16M -f 4
  pair bound all_reduce.2.bound 2 --op all_reduce -b 8 -e 64M -f 2
  for op in all_gather reduce_scatter broadcast; do
    pair bound "$op.2.bound" 2 --op "$op" -b 8 -e 16M -f 2
  done
  pair over all_reduce.4 4 --op all_reduce -b 8 -e 1M -f 2 --iters 200 --warmup 20
  pair over broadcast_object.4 4 --op broadcast_object -b 64 -e 64K -f 4 --iters 200 --warmup 20
}

main() {
  local t_start=$SECONDS
  build
  # only this script's own JSON (the per-repeat files and rounds.json, which report.py folds them
  # into); the other scripts' results (startup_curve*.json, recovery.json, ...) are kept
  find "$RESULTS" -maxdepth 1 \( -name '*.[0-9].json' -o -name '*.[0-9][0-9].json' -o -name rounds.json \
    -o -name memcpy.json -o -name startup.json \) -delete
  rm -rf "$RESULTS/logs" "$RESULTS/failures.txt" "$RESULTS/plot"
  mkdir -p "$RESULTS/logs"
  machine
  wait_quiet
  echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RESULTS/machine.txt"
  export PSTATE_TIMEOUT_MS=${PSTATE_TIMEOUT_MS:-60000}

  run_case memcpy "$RESULTS/bin/memcpy_bw" -s 64M --iters 30 --json "$RESULTS/memcpy.json"
  local rep
  for rep in $(seq 1 "$REPEATS"); do
    run_case handoff_floor "$RESULTS/bin/handoff_floor" --bind -b 8 -e 1K --json "$RESULTS/handoff_floor.$rep.json"
  done
  if [ "$QUICK" = 1 ]; then
    pair plain all_reduce.2 2 --op all_reduce -b 8 -e 64K -f 32
    pair bound all_reduce.2.bound 2 --op all_reduce -b 8 -e 64K -f 32
    pair over all_reduce.4 4 --op all_reduce -b 8 -e 1M -f 128 --iters 50
    pair over broadcast_object.4 4 --op broadcast_object -b 1K -e 1K --iters 50
  else
    cases
  fi
  startup
  echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RESULTS/machine.txt"
  echo "elapsed_s=$((SECONDS - t_start))" >>"$RESULTS/machine.txt"
  python3 bench/report.py "$RESULTS" "$REPORT"
  log "wrote $REPORT/collectives.md and $RESULTS/time_vs_size.png in $((SECONDS - t_start)) s"
}

if [ -n "$ONLY" ]; then
  for name in ${ONLY//,/ }; do rm -f "$RESULTS/$name".*.json "$RESULTS/logs/$name".*.log; done
  partial
else
  main "$@"
fi
