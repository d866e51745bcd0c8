#!/usr/bin/env bash
# bench/store_server_ab.sh — the TCP store server of two builds side by side, at protocol level.
#
#   BASE=/path/to/other/build bench/store_server_ab.sh [SIZES] [REPEATS]   (defaults "1024 2048 4096 8192", 2)
#
# For each size, REPEATS times, alternating the base build and this one (BUILD_DIR, default
# build/): build/tests/store_protocol (bench/store_protocol.cpp: N ranks as threads of one process,
# the library's TcpStore client each, the real server in rank 0, the rendezvous pstate_init runs)
# under /usr/bin/time. Prints one line per run: build, ranks, the rendezvous time (exchange_ms),
# the whole process' CPU seconds (user + sys: the server's turns dominate at thousands of ranks,
# and CPU time is less at the mercy of other load than wall time), peak RSS, and the server's
# accepted connections (2 per rank when no connection had to be retried: more means clients
# gave up on a slow handshake and reconnected). It needs 2 descriptors per rank (ulimit -n).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
BASE=${BASE:?set BASE to the build directory to compare with}
SIZES=${1:-"1024 2048 4096 8192"}
REPEATS=${2:-2}
printf '%-6s %6s %12s %8s %8s %10s  %s\n' build ranks exchange_ms cpu_s wall_s rss_mb accepted
for n in $SIZES; do
  for ((r = 0; r < REPEATS; r++)); do
    for which in base this; do
      dir=$([ "$which" = base ] && echo "$BASE" || echo "$BUILD_DIR")
      out=$( { /usr/bin/time -f 'TIME %U %S %e %M' "$dir/tests/store_protocol" --sizes "$n" --address-bytes 265; } 2>&1) || {
        printf '%-6s %6s  failed: %s\n' "$which" "$n" "$(echo "$out" | tail -n 1)"
        continue
      }
      ex=$(echo "$out" | sed -nE 's/.*"exchange_ms": ([0-9.]+).*/\1/p' | head -n 1)
      acc=$(echo "$out" | sed -nE 's/.*"accepted": ([0-9]+).*/\1/p' | head -n 1)
      read -r _ u s e m < <(echo "$out" | grep '^TIME ')
      printf '%-6s %6s %12s %8.2f %8.2f %10.0f  %s\n' "$which" "$n" "$ex" "$(awk -v u="$u" -v s="$s" 'BEGIN { print u + s }')" "$e" "$((m / 1024))" "$acc"
    done
  done
done
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(git rev-parse --short HEAD), nproc $(nproc), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
