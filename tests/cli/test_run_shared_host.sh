#!/usr/bin/env bash
# test_run_shared_host.sh PSTATE — two `pstate run` jobs on one host (issue 42, item 4): the CPUs
# each job pins are its own, inside the launcher's affinity, held in the host-wide record
# (src/cli/cpu_claims.hpp) until the job's last process on them ends, SIGKILL included; a job
# that finds no free CPU runs its ranks unpinned with spinning off (PSTATE_SPIN=0, and the
# library's own INFO line). Counts, not timings: which CPUs each rank may run on
# (Cpus_allowed_list) and what the launcher passed and said.
#
# Every launcher runs under `taskset -c A,B` (the first two CPUs this test may use), so the host
# has two CPUs for these jobs whatever its size; the record is a directory of the test's own
# (PSTATE_CPU_CLAIM_DIR), so that other tests' jobs running at the same time change no count.
# Prints "N passed, M failed"; exit 77 (skipped) with fewer than two CPUs.
set -u
PSTATE=$1
pass=0 fail=0
check() {  # check NAME CONDITION-EXIT-STATUS
  if [ "$2" -eq 0 ]; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi
}

read -r A B < <(python3 -c 'import os; c = sorted(os.sched_getaffinity(0)); print(*c[:2]) if len(c) > 1 else print()')
if [ -z "${B:-}" ]; then
  echo "skipped: fewer than two CPUs"
  exit 77
fi
PAIR="$A,$B"
PAIR_LIST=$(taskset -c "$PAIR" grep Cpus_allowed_list /proc/self/status | cut -f2)  # as the kernel writes it

DIR=$(mktemp -d)
export PSTATE_CPU_CLAIM_DIR=$DIR/cpus
JOBS=()
cleanup() {
  touch "$DIR"/go.all
  for pg in "${JOBS[@]}"; do kill -KILL -- "-$pg" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$DIR"
}
trap cleanup EXIT

# One rank: writes $DIR/<tag>.<rank> (its Cpus_allowed_list, its PSTATE_SPIN, its pid), then
# waits for $DIR/go.<tag> (or go.all) so that the job holds its CPUs meanwhile.
RANK_SH='f=$DIR/$TAG.$RANK
{ grep Cpus_allowed_list /proc/self/status | cut -f2; echo "spin=${PSTATE_SPIN-unset}"; echo "$$"; } >"$f.tmp" && mv "$f.tmp" "$f"
i=0; while [ ! -e "$DIR/go.$TAG" ] && [ ! -e "$DIR/go.all" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done'
export DIR

# start TAG N [TASKSET-CPUS] [pstate run options...]: job TAG of N ranks in a process group of its
# own (setsid), its launcher under taskset; returns once every rank wrote its file.
start() {
  local tag=$1 n=$2 cpus=$3 r i
  shift 3
  TAG=$tag setsid taskset -c "$cpus" "$PSTATE" run -n "$n" "$@" -- sh -c "$RANK_SH" >"$DIR/$tag.log" 2>&1 &
  JOBS+=("$!")
  eval "PID_$tag=$!"
  for ((i = 0; i < 400; i++)); do
    for ((r = 0; r < n; r++)); do [ -e "$DIR/$tag.$r" ] || break; done
    [ $r -eq "$n" ] && return 0
    sleep 0.05
  done
  echo "job $tag did not start:"
  cat "$DIR/$tag.log"
  return 1
}
cpus_of() { sed -n 1p "$DIR/$1"; }   # cpus_of TAG.RANK
spin_of() { sed -n 2p "$DIR/$1"; }
pid_of() { sed -n 3p "$DIR/$1"; }
# Seen from outside, as an operator would: a rank's affinity and its PSTATE_SPIN, from /proc.
proc_cpus() { grep Cpus_allowed_list "/proc/$(pid_of "$1")/status" | cut -f2; }
proc_spin() { tr '\0' '\n' <"/proc/$(pid_of "$1")/environ" | grep '^PSTATE_SPIN=' || echo unset; }
finish() { touch "$DIR/go.$1"; eval "wait \$PID_$1"; }   # lets job TAG end, waits for its launcher
gone() {  # gone PGID: waits until no process of the group is left (a SIGKILLed one ends at once)
  local i
  for ((i = 0; i < 200; i++)); do kill -0 -- "-$1" 2>/dev/null || return 0; sleep 0.05; done
}

# 1. Two jobs side by side: a CPU each, inside the pair, not the same one; both spin (nothing set).
start a 1 "$PAIR" && start b 1 "$PAIR"
ca=$(cpus_of a.0) cb=$(cpus_of b.0)
echo "  job a on CPU $ca, job b on CPU $cb"
{ [ "$ca" = "$A" ] || [ "$ca" = "$B" ]; } && { [ "$cb" = "$A" ] || [ "$cb" = "$B" ]; } && [ "$ca" != "$cb" ]
check "two jobs side by side pin their ranks to different CPUs of the pair" $?
[ "$(spin_of a.0)" = spin=unset ] && [ "$(spin_of b.0)" = spin=unset ]
check "ranks pinned alone are left to spin (no PSTATE_SPIN)" $?
[ "$(proc_cpus a.0)" = "$ca" ] && [ "$(proc_cpus b.0)" = "$cb" ] && [ "$(proc_spin a.0)" = unset ] &&
  [ "$(proc_spin b.0)" = unset ]
check "... as /proc/<pid>/status and /proc/<pid>/environ of the ranks say too" $?

# 2. A third job finds no free CPU: unpinned on the pair, spinning off, and the launcher says why.
start c 1 "$PAIR"
cc=$(cpus_of c.0)
[ "$cc" = "$PAIR_LIST" ]; check "a job with no free CPU runs unpinned on its launcher's CPUs ($cc)" $?
[ "$(spin_of c.0)" = spin=0 ] && [ "$(proc_spin c.0)" = PSTATE_SPIN=0 ] && [ "$(proc_cpus c.0)" = "$PAIR_LIST" ]
check "... with spinning off (PSTATE_SPIN=0 in its environment)" $?
grep -q "pstate run: warning: 1 rank and 0 free CPUs of CPUs .*held by other pstate jobs.*PSTATE_SPIN=0" "$DIR/c.log" &&
  grep -q "pstate run pid $PID_a" "$DIR/c.log"
check "... and its launcher warns, naming the jobs that hold the CPUs" $?
finish c
# The library reads it: a job of 2 ranks with no free CPU logs "waits spin 0 us" for its groups.
PSTATE_DEBUG=INFO taskset -c "$PAIR" "$PSTATE" run -n 2 -- "$PSTATE" bench -b 8 -e 8 --iters 20 >"$DIR/bench0.log" 2>&1
spin0=$(grep -c 'INFO world:0: shared memory.*waits spin 0 us' "$DIR/bench0.log")
[ "$spin0" -eq 2 ] && ! grep -q 'waits spin [1-9]' "$DIR/bench0.log"
check "the library's waits do not spin in such a job ($spin0 of 2 ranks say 'waits spin 0 us')" $?

# 3. SIGKILL the whole of job a (launcher and rank): its CPU is free again for the next job.
{ kill -KILL -- "-$PID_a"; wait "$PID_a"; } 2>/dev/null  # no "Killed" line
gone "$PID_a"
start d 1 "$PAIR"
cd_=$(cpus_of d.0)
[ "$cd_" = "$ca" ] && [ "$(spin_of d.0)" = spin=unset ]
check "a SIGKILLed job's CPU ($ca) is taken by the next job (got $cd_)" $?

# 4. SIGKILL only job b's launcher: its rank, still running on CPU $cb, keeps it claimed (it
#    inherited the lock); once the rank is killed too, the next job gets the CPU.
{ kill -KILL "$PID_b"; wait "$PID_b"; } 2>/dev/null  # no "Killed" line
rank_b=$(pid_of b.0)
kill -0 "$rank_b" 2>/dev/null; check "job b's rank outlives its SIGKILLed launcher" $?
start e 1 "$PAIR"
ce=$(cpus_of e.0) se=$(spin_of e.0)
[ "$ce" = "$PAIR_LIST" ] && [ "$se" = spin=0 ]
check "the CPU of a rank whose launcher was killed stays claimed (next job: $ce, $se)" $?
finish e
kill -KILL -- "-$PID_b"  # the rank and its children (they inherited the lock too)
gone "$PID_b"
start f 1 "$PAIR"
cf=$(cpus_of f.0)
[ "$cf" = "$cb" ]; check "once that rank is killed too, its CPU ($cb) is taken by the next job (got $cf)" $?
finish d
finish f

# 5. The inherited affinity: under taskset -c B a job pins inside {B}; a second one there shares
#    B without spinning, never spilling onto A; more ranks than CPUs share them without spinning.
start g 1 "$B"
[ "$(cpus_of g.0)" = "$B" ] && [ "$(spin_of g.0)" = spin=unset ]; check "a job under taskset -c $B pins its rank to CPU $B" $?
start h 1 "$B"
ch=$(cpus_of h.0) sh_=$(spin_of h.0)
[ "$ch" = "$B" ] && [ "$sh_" = spin=0 ]
check "a second job under taskset -c $B stays on CPU $B, with spinning off ($ch, $sh_)" $?
finish g
finish h
start i 2 "$B"
[ "$(cpus_of i.0)" = "$B" ] && [ "$(cpus_of i.1)" = "$B" ] && [ "$(spin_of i.0)" = spin=0 ] && [ "$(spin_of i.1)" = spin=0 ]
check "2 ranks under taskset -c $B share it without spinning" $?
! grep -q warning "$DIR/i.log"; check "... and, with no other job there, no warning" $?
finish i

# 6. Jobs that start at the same instant never get the same CPU (the lock is taken, not looked at).
same=0
for round in 1 2 3 4 5; do
  for t in p q; do
    TAG=$t$round taskset -c "$PAIR" "$PSTATE" run -n 1 -- sh -c "$RANK_SH" >"$DIR/$t$round.log" 2>&1 &
    eval "PID_$t$round=$!"
  done
  for ((i = 0; i < 400; i++)); do [ -e "$DIR/p$round.0" ] && [ -e "$DIR/q$round.0" ] && break; sleep 0.05; done
  [ "$(cpus_of "p$round.0")" = "$(cpus_of "q$round.0")" ] && same=$((same + 1))
  finish "p$round"
  finish "q$round"
done
[ $same -eq 0 ]; check "two jobs started at once get different CPUs (5 rounds; $same shared one)" $?

# 7. --no-bind pins and claims nothing; with the CPUs held by others its ranks do not spin.
start j 2 "$PAIR"
start k 1 "$PAIR" --no-bind
[ "$(cpus_of k.0)" = "$PAIR_LIST" ] && [ "$(spin_of k.0)" = spin=0 ]; check "--no-bind among held CPUs: unpinned, no spinning" $?
finish k
finish j
start l 2 "$PAIR" --no-bind
start m 2 "$PAIR"
[ "$(cpus_of m.0)" != "$(cpus_of m.1)" ] && [ "$(spin_of m.0)" = spin=unset ]
check "--no-bind claims no CPU (a job beside it still pins one per CPU)" $?
finish l
finish m

# 8. The default record: /dev/shm/pstate-cpus, world-writable and sticky, for every user's jobs.
PSTATE_CPU_CLAIM_DIR= "$PSTATE" run -n 1 -- true >/dev/null 2>&1
[ "$(stat -c %a /dev/shm/pstate-cpus 2>/dev/null)" = 1777 ]; check "the default record is /dev/shm/pstate-cpus, mode 1777" $?

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
