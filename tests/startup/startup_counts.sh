#!/usr/bin/env bash
# startup_counts.sh — what start-up costs each rank, counted (issue 30, item 5), whole processes:
# `pstate run -n N -- pstate bench --op startup --tp T --pp P` at PSTATE_DEBUG=INFO, and every
# rank's "counts after PHASE" lines (bench/startup_counts.py reads them) must match the rules,
# computed here from the protocol and the algorithms, not read from the code:
#   store, per rank, pstate_init: 1 connection; set its record, add and wait at the barrier, a
#     get of the directory and one of its first peers' records (ranks 1..N-1) -> 5 requests;
#     rank 0 gets every record, sets the directory and the others' first peers' records -> 2N + 3;
#     the barrier's last arrival sets its "done" key -> 1 more (one rank);
#   the first peers are the world barrier's (below): no rank reads another record later here;
#   initialize_model_parallel and finalize send nothing more to the store (their agreement and
#     barriers run over UCX and shared memory);
#   UCX endpoints: the world barrier at the end of pstate_init is the dissemination barrier,
#     rank r sends to r + 2^k and receives from r - 2^k (mod N), with an endpoint to each:
#     |{r +- 2^k mod N, 2^k < N} - {r}|, not N - 1; a one-host world of up to 255 ranks runs the
#     model-parallel agreement and barriers in shared memory: no endpoint more later;
#   with PSTATE_SHM=0 (everything over UCX) and an all_reduce on the tensor-parallel group, that
#     group meets peers beyond the world barrier's, and each peer met after pstate_init costs
#     exactly one store request (the read of its record);
#   the launcher's store server answered at least every frame the ranks sent.
# Usage: startup_counts.sh N TP PP [BENCH ARGS...]   (default --op startup: no collective of its own)
set -euo pipefail
N=${1:?usage: startup_counts.sh N TP PP [BENCH ARGS...]} TP=${2:?} PP=${3:?}
shift 3
BENCH_ARGS=("$@")
[ ${#BENCH_ARGS[@]} -gt 0 ] || BENCH_ARGS=(--op startup)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${PSTATE_BUILD_DIR:-$ROOT/build}
PSTATE_CLI=${PSTATE_CLI:-$BUILD/pstate}
PY=$(command -v /usr/bin/python3 || command -v python3)
LOG=$(mktemp "${TMPDIR:-/tmp}/startup_counts.XXXXXX")
trap 'rm -f "$LOG"' EXIT
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PSTATE_STORE
if ! PSTATE_DEBUG=INFO PSTATE_TIMEOUT_MS=${PSTATE_TIMEOUT_MS:-60000} timeout 120 \
  "$PSTATE_CLI" run --no-bind -n "$N" -- "$PSTATE_CLI" bench "${BENCH_ARGS[@]}" --tp "$TP" --pp "$PP" >"$LOG" 2>&1; then
  tail -40 "$LOG"
  echo "startup_counts.sh: the job failed" >&2
  exit 1
fi
"$PY" "$ROOT/bench/startup_counts.py" "$LOG" | "$PY" "$ROOT/tests/startup/startup_counts_check.py" "$N"
