#!/bin/sh
# bench/bind.sh — runs a command bound to one core, LOCAL_RANK mod nproc, as `mpirun --bind-to
# core` does for MPI ranks: `pstate run -n 2 -- bench/bind.sh pstate bench ...` (the ".bound"
# cases of bench/run.sh). LOCAL_RANK comes from the launcher.
exec taskset -c "$(( ${LOCAL_RANK:?LOCAL_RANK is not set: run under pstate run} % $(nproc) ))" "$@"
