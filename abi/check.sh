#!/usr/bin/env bash
# abi/check.sh — the ABI gate: libpstate.so.<major> may only grow within a major.
#
# Builds the ABI probe of a source tree, describes it with abidw (libabigail, Debian package
# abigail-tools) and compares it with the baseline abi/libpstate.so.<major>.abi with abidiff:
#
#   exit 0  the ABI is the baseline's, or only grew: functions added, enumerators appended,
#           members appended to a struct that starts with `size_t struct_size` (what grew is
#           printed); or the SONAME was bumped past the baseline's (it says to regenerate it)
#   exit 1  an incompatible change (abidiff's ABIDIFF_ABI_INCOMPATIBLE_CHANGE bit, 8: a function
#           removed) or any other change to what 1.0 already had (a parameter's type, a member
#           removed, moved or retyped, an enumerator renumbered, a member appended to a struct
#           without struct_size, a return type): the report says what and how to proceed
#   exit 2  the check itself could not run (compiler error, no baseline, abidiff error)
#   exit 77 abidw/abidiff missing (`./build.sh deps` installs abigail-tools; ctest: skipped)
#
# The probe, and why not the library itself: abidw reads types from DWARF, which the Release
# library that CI builds and ships has none of, and building the whole library a second time with
# -g costs minutes on 2 cores. Every exported function of libpstate is defined in a file of src/
# that spells PSTATE_API (today src/api/*.cpp); the probe is those files alone, compiled as one
# unit at -O0 -g (no optimisation: the fastest compile; optimisation changes no type) and linked into a shared
# library with the library's own version script and SONAME. Nothing else is linked (its
# internal references stay undefined: the probe is read, never loaded), so it takes ~5-10 s, and
# its public types and exported functions are the library's: --library LIB checks that the probe
# exports exactly the pstate_* symbols of a real build, and abi_gate (ctest) also compares the
# probe's ABI with the real library's wherever that has debug info (RelWithDebInfo, Debug).
# abidw keeps the exported functions and the types they reach as include/pstate declares them
# (--headers-dir, --drop-private-types, --exported-interfaces-only: the library's definitions of
# the opaque handles are not part of the ABI), without locations, build paths or DT_NEEDED, with
# hashed type ids, so its XML is the same from any checkout, compiler flags or build type.
#
# What counts as growth is the rule of pstate.h: structs that start with struct_size may gain
# members at their end (abi/cut_appended.py cuts exactly those members off before the second
# comparison, for the structs that start with struct_size in the header being checked, so a
# struct that gets struct_size later is covered from then on; a member added into the old tail
# padding is refused: an old caller's struct_size covers it); abidiff itself treats appended
# enumerators as harmless; added functions are set aside by that second run's --no-added-syms,
# which must then find no change at all.
#
# Usage: abi/check.sh [--source DIR] [--baseline FILE] [--work DIR] [--library LIB] [--update]
#   --source DIR     the tree to check (default: the checkout of this script)
#   --baseline FILE  the ABI to compare with (default: DIR/abi/libpstate.so.<major>.abi)
#   --work DIR       where the probe is built and kept (default: DIR/build/abi); a probe of
#                    unchanged sources (same files under src/ and include/, version script,
#                    compiler and flags) is reused, so a second check costs ~1 s
#   --library LIB    also check that LIB (a built libpstate.so.<major>) exports exactly the
#                    probe's pstate_* symbols
#   --library-abi    and that abidw's description of LIB (built with full debug info:
#                    RelWithDebInfo or Debug) equals the probe's, without any suppression
#   --update         write the probe's ABI to the baseline instead of comparing
#                    (abi/update_baseline.sh)
# CXX is the compiler (default c++).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$here/.." && pwd)
BASELINE="" WORK="" LIBRARY="" LIBRARY_ABI=0 UPDATE=0
while (($#)); do
  case "$1" in
    --source) SRC=$(cd "$2" && pwd); shift 2 ;;
    --baseline) BASELINE=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --library) LIBRARY=$2; shift 2 ;;
    --library-abi) LIBRARY_ABI=1; shift ;;
    --update) UPDATE=1; shift ;;
    *) echo "usage: abi/check.sh [--source DIR] [--baseline FILE] [--work DIR] [--library LIB] [--update]" >&2; exit 2 ;;
  esac
done
WORK=${WORK:-$SRC/build/abi}
CXX=${CXX:-c++}
say() { echo "abi/check.sh: $*"; }
die() { echo "abi/check.sh: $*" >&2; exit 2; }

for tool in abidw abidiff; do
  command -v "$tool" >/dev/null || { say "$tool not found: install abigail-tools (./build.sh deps)"; exit 77; }
done

# ---- the major: CMakeLists.txt's project version and pstate.h must agree ----------------------
header=$SRC/include/pstate/pstate.h
major=$(sed -n 's/^#define PSTATE_VERSION_MAJOR \([0-9][0-9]*\)$/\1/p' "$header")
cmake_major=$(sed -n 's/^project(pstate VERSION \([0-9][0-9]*\)\..*/\1/p' "$SRC/CMakeLists.txt")
[ -n "$major" ] || die "no '#define PSTATE_VERSION_MAJOR N' in $header"
[ "$major" = "$cmake_major" ] ||
  die "pstate.h says major $major, CMakeLists.txt's project(VERSION) says ${cmake_major:-nothing}: bump both"
soname=libpstate.so.$major
default_baseline=$SRC/abi/$soname.abi
BASELINE=${BASELINE:-$default_baseline}

# ---- the probe -----------------------------------------------------------------------------
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
mapfile -t sources < <(cd "$SRC" && grep -rlE '^\s*(extern "C" )?PSTATE_API ' src --include='*.cpp' | sort)
((${#sources[@]})) || die "no file under $SRC/src defines a PSTATE_API function"
# -O0 -g: the fastest compile with full DWARF. -w: a probe of a deliberately broken variant
# (tests/abi/test_gate.sh) may warn; the real build keeps the warnings.
flags=(-std=c++20 -O0 -g -fPIC -fvisibility=hidden -fvisibility-inlines-hidden -w -I"$SRC/include" -I"$SRC/src")
read -ra ucx_flags <<<"$(pkg-config --cflags ucx 2>/dev/null || true)"
flags+=("${ucx_flags[@]}")
key=$( { "$CXX" --version | head -1; echo "${flags[*]}" | sed "s|$SRC|SRC|g"; echo "$major"; abidw --version;
         sha256sum <"$here/check.sh";
         cd "$SRC" && find src include cmake/pstate.map -type f \( -name '*.[ch]' -o -name '*.[ch]pp' -o -name '*.map' \) \
           -print0 | sort -z | xargs -0 sha256sum; } | sha256sum | cut -d' ' -f1)
probe=$WORK/$soname
abi=$WORK/$soname.abi
# abidw: the exported functions and the types they reach, as pstate.h declares them (the
# library's own definitions of the opaque handles, std:: and pstate:: types stay out), and
# nothing that depends on where or how it was built (locations, the compilation directory,
# DT_NEEDED; the paths of the compiled files are made relative to the source tree).
describe() { # describe LIBRARY OUT
  abidw --headers-dir "$SRC/include/pstate" --drop-private-types --exported-interfaces-only --drop-undefined-syms \
    --no-show-locs --no-corpus-path --no-comp-dir-path --no-elf-needed --type-id-style hash --out-file "$2" "$1" ||
    die "abidw $1 failed"
  sed -i "s|path='$SRC/|path='|" "$2"
}
if [ -f "$WORK/key" ] && [ "$(cat "$WORK/key")" = "$key" ] && [ -f "$abi" ] && [ -f "$probe" ]; then
  say "probe of these sources already built: $probe"
else
  rm -f "$WORK/key" "$abi"
  t0=$SECONDS
  # One translation unit that includes them all, as CMake's unity build (PSTATE_UNITY_BUILD, CI's
  # sanitizer builds) already compiles them: the headers are parsed once (~3 s instead of ~14 s
  # of CPU for 7 files). Compiled from $WORK as probe.cpp, so its DWARF names no checkout.
  printf '#include "%s"\n' "${sources[@]/#/$SRC/}" >"$WORK/probe.cpp"
  (cd "$WORK" && "$CXX" "${flags[@]}" -c probe.cpp -o probe.o) 2>"$WORK/compile.log" ||
    { cat "$WORK/compile.log" >&2; die "the probe of $SRC does not compile (above)"; }
  "$CXX" -shared -o "$probe" "$WORK/probe.o" -Wl,--version-script="$SRC/cmake/pstate.map" -Wl,-soname,"$soname" ||
    die "the probe of $SRC does not link"
  describe "$probe" "$abi"
  echo "$key" >"$WORK/key"
  say "probe built from ${#sources[@]} files (${sources[*]}) in $((SECONDS - t0)) s: $probe"
fi

exported() { nm -D --defined-only "$1" | awk '{print $NF}' | sed 's/@.*//' | grep '^pstate_' | sort -u; }
if [ -n "$LIBRARY" ]; then
  missing=$(comm -23 <(exported "$LIBRARY") <(exported "$probe"))
  extra=$(comm -13 <(exported "$LIBRARY") <(exported "$probe"))
  [ -z "$missing$extra" ] || {
    echo "abi/check.sh: the probe does not export what $LIBRARY exports:" >&2
    [ -z "$missing" ] || echo "  only in the library (defined where no line starts with PSTATE_API?): $missing" >&2
    [ -z "$extra" ] || echo "  only in the probe: $extra" >&2
    exit 1
  }
  say "the probe exports the same $(exported "$probe" | wc -l) pstate_* symbols as $LIBRARY"
  if ((LIBRARY_ABI)); then
    t0=$SECONDS
    describe "$LIBRARY" "$WORK/library.abi"
    set +e
    abidiff --no-default-suppression "$abi" "$WORK/library.abi" >"$WORK/library-report.txt" 2>&1
    rc=$?
    set -e
    ((rc == 0)) || {
      echo "abi/check.sh: the probe's ABI differs from $LIBRARY's (abidiff status $rc): the probe does not" \
        "stand for the library" >&2
      sed 's/^/  /' "$WORK/library-report.txt" >&2
      exit 1
    }
    say "abidw of $LIBRARY equals the probe's description ($((SECONDS - t0)) s)"
  fi
fi

if ((UPDATE)); then
  mkdir -p "$(dirname "$BASELINE")"
  cp "$abi" "$BASELINE"
  say "wrote $BASELINE ($(grep -c '<elf-symbol ' "$BASELINE") symbols)"
  if [ "$BASELINE" = "$default_baseline" ]; then  # a bumped SONAME: the old major's baseline goes
    for old in "$SRC"/abi/libpstate.so.*.abi; do
      [ "$old" = "$BASELINE" ] || { rm -f "$old"; say "removed $old (the baseline of an older major)"; }
    done
  fi
  exit 0
fi

# ---- which baseline: a missing one for this major means the SONAME was bumped ----------------
corpus_soname() { sed -n "s/.*<abi-corpus [^>]*soname='\([^']*\)'.*/\1/p" "$1" | head -1; }
if [ ! -f "$BASELINE" ]; then
  older=$(ls "$(dirname "$BASELINE")"/libpstate.so.*.abi 2>/dev/null | sort -V | tail -1 || true)
  [ -n "$older" ] || die "no baseline $BASELINE: write it with abi/update_baseline.sh"
  BASELINE=$older
fi
base_soname=$(corpus_soname "$BASELINE")
[ -n "$base_soname" ] || die "$BASELINE names no SONAME: not an abidw file?"
if [ "$base_soname" != "$soname" ]; then
  base_major=${base_soname##*.}
  if ((major > base_major)); then
    say "the SONAME was bumped: $base_soname -> $soname. Incompatible changes are allowed with it,"
    say "and the baseline no longer applies: regenerate it with abi/update_baseline.sh (writes"
    say "abi/$soname.abi, removes $(basename "$BASELINE")) and commit it with the bump."
    exit 0
  fi
  echo "abi/check.sh: the probe is $soname but the baseline $BASELINE is $base_soname:" \
    "a major may only go up" >&2
  exit 1
fi

# ---- compare ----------------------------------------------------------------------------------
# 1. abidiff as it is. Identical (status 0; appended enumerators are harmless to abidiff and
#    count as identical) passes; status bit 8 (ABIDIFF_ABI_INCOMPATIBLE_CHANGE: a function or its
#    symbol removed, the SONAME changed) refuses.
# 2. Otherwise (bit 4, ABIDIFF_ABI_CHANGE) only growth may remain: the members appended to the
#    structs that start with struct_size are cut off again (abi/cut_appended.py: the library
#    reads and writes no further than the caller's struct_size), and abidiff of the baseline
#    against that, without the added functions (--no-added-syms), must find nothing. abidiff
#    marks many breaking changes (a member moved, a parameter retyped) with bit 4 only, so
#    every change to what the baseline has is refused, not only what abidiff calls incompatible.
diff_opts=(--no-default-suppression)
appendable=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import cut_appended as c
print(" ".join(sorted(c.struct_size_structs(sys.argv[2]))))' "$here" "$header")
abidiff_to() { # abidiff_to REPORT ARGS...: abidiff's status; dies on an abidiff error
  local out=$1 status=0
  shift
  abidiff "${diff_opts[@]}" "$@" >"$out" 2>&1 || status=$?
  if ((status & 3)); then
    cat "$out" >&2
    die "abidiff $* failed (status $status)"
  fi
  return "$status"
}
refuse() {
  echo "abi/check.sh: INCOMPATIBLE: $1" >&2
  sed 's/^/  /' "$2" >&2
  cat >&2 <<EOF
abi/check.sh: programs built against $soname would break (see docs/abi.md, "The gate"). Either make
the change compatible — add a function instead of changing one, append enumerators, append members
only at the end of the structs that start with struct_size ($appendable) — or, for a deliberate
break, bump the major (PSTATE_VERSION_MAJOR in include/pstate/pstate.h and project(VERSION) in
CMakeLists.txt: libpstate.so.$((major + 1))) and run abi/update_baseline.sh.
EOF
  exit 1
}
rc=0
abidiff_to "$WORK/report.txt" "$BASELINE" "$abi" || rc=$?
if ((rc == 0)); then
  if cmp -s "$BASELINE" "$abi"; then
    say "the ABI is the baseline's ($(basename "$BASELINE")): no change"
  else
    abidiff_to "$WORK/report.txt" --harmless "$BASELINE" "$abi" || true
    say "compatible: only harmless changes (enumerators appended):"
    sed 's/^/  /' "$WORK/report.txt"
  fi
  exit 0
fi
((rc & 8)) && refuse "abidiff reports an incompatible change (status $rc) against $(basename "$BASELINE")" "$WORK/report.txt"
python3 "$here/cut_appended.py" "$header" "$BASELINE" "$abi" "$WORK/cut.abi" >"$WORK/cut.txt" ||
  die "abi/cut_appended.py failed"
rc2=0
abidiff_to "$WORK/report-existing.txt" --no-added-syms "$BASELINE" "$WORK/cut.abi" || rc2=$?
((rc2 == 0)) || refuse "what $(basename "$BASELINE") already has changed" "$WORK/report-existing.txt"
grown=$(cut -d' ' -f1 "$WORK/cut.txt" | tr '\n' ' ' | sed 's/ $//')
say "compatible: the ABI grew (abidiff status $rc; additions only${grown:+; members appended to $grown}):"
sed 's/^/  /' "$WORK/report.txt"
