#!/usr/bin/env bash
# test_gate.sh BUILD_DIR — the ABI gate (abi/check.sh) refuses what breaks libpstate.so.<major>
# and lets additions through, shown on patched copies of this source (ctest abi_gate_variants).
#
# First the probe of the unpatched source is described (build/abi, shared with ctest abi_gate
# and .ci/run: a probe of unchanged sources is reused) and written as this test's baseline, so
# the test does not depend on abi/libpstate.so.<major>.abi being current. Then, for each variant
# of tests/abi/variants.py — a parameter's type changed, a function no longer exported, a member
# of the dlopen table removed, struct members reordered or retyped, an enumerator renumbered, a
# member appended to a struct without struct_size, a reorder hidden behind an allowed append;
# a function added, an enumerator appended, a member appended to a struct_size struct; a break
# with its SONAME bump — a copy of src/, include/, cmake/pstate.map and CMakeLists.txt under
# BUILD_DIR/abi-variants/NAME is patched and checked against that baseline, and the gate's exit
# status must be the expected one: 1 (REFUSED), 0 (PASSES) or 0 saying the SONAME was bumped
# (BUMPED). Logs stay in BUILD_DIR/abi-variants/NAME.log. Exits 77 (ctest: skipped) without
# abigail-tools. VARIANTS=a,b runs only those. Two variants are checked at a time, each
# compiling its one unit on one core.
set -euo pipefail
BUILD=$(cd "${1:?usage: test_gate.sh BUILD_DIR}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$BUILD/abi-variants
fail() { echo "test_gate.sh: FAIL: $*" >&2; exit 1; }
command -v abidw >/dev/null && command -v abidiff >/dev/null ||
  { echo "test_gate.sh: abidw/abidiff not found (abigail-tools): skipped"; exit 77; }

t0=$SECONDS
rm -rf "$OUT"
mkdir -p "$OUT"
"$SRC/abi/check.sh" --source "$SRC" --work "$BUILD/abi" --update --baseline "$OUT/base.abi" >"$OUT/base.log" 2>&1 ||
  { cat "$OUT/base.log"; fail "the probe of the unpatched source"; }
echo "test_gate.sh: baseline of the unpatched source in $((SECONDS - t0)) s"

# check_variant NAME EXPECTED: patch a copy, run the gate, compare its answer with EXPECTED.
check_variant() {
  local name=$1 expected=$2 dir=$OUT/$1 log=$OUT/$1.log rc=0 got t=$SECONDS
  mkdir -p "$dir/cmake"
  cp -r "$SRC/src" "$SRC/include" "$SRC/CMakeLists.txt" "$dir/"
  cp "$SRC/cmake/pstate.map" "$dir/cmake/"
  python3 "$SRC/tests/abi/variants.py" apply "$name" "$dir" >"$log" 2>&1 || { echo "ERROR $name: $(cat "$log")"; return; }
  "$SRC/abi/check.sh" --source "$dir" --baseline "$OUT/base.abi" --work "$dir/probe" >>"$log" 2>&1 || rc=$?
  case "$rc" in
    0) got=PASSES; grep -q "SONAME was bumped" "$log" && got=BUMPED ;;
    1) got=REFUSED ;;
    *) got="ERROR(exit $rc)" ;;
  esac
  # what the gate said, in a line: its first INCOMPATIBLE/compatible/bumped line
  echo "$([ "$got" = "$expected" ] && echo ok || echo WRONG) $name: expected $expected, got $got in $((SECONDS - t)) s:" \
    "$(grep -m1 -E 'INCOMPATIBLE|compatible:|SONAME was bumped|no change' "$log" | cut -c1-150)"
}

mapfile -t variants < <(python3 "$SRC/tests/abi/variants.py" list)
results=$OUT/results.txt
: >"$results"
for line in "${variants[@]}"; do
  read -r name expected _ <<<"$line"
  [ -z "${VARIANTS:-}" ] || [[ ",$VARIANTS," == *",$name,"* ]] || continue
  check_variant "$name" "$expected" >>"$results" &
  while (($(jobs -rp | wc -l) >= 2)); do wait -n || true; done
done
wait
sort "$results"
n=$(wc -l <"$results")
bad=$(grep -cv '^ok ' "$results" || true)
echo "test_gate.sh: $n variants, $bad wrong, $((SECONDS - t0)) s (logs: $OUT/NAME.log)"
((n > 0)) || fail "no variant ran"
((bad == 0)) || {
  for name in $(grep -v '^ok ' "$results" | awk '{print $2}' | tr -d :); do
    echo "---- $name ----"; tail -40 "$OUT/$name.log"
  done
  fail "$bad variants were not answered as expected"
}
