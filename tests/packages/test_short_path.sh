#!/usr/bin/env bash
# test_short_path.sh SOURCE_DIR — README's install and package commands from a checkout at a short
# path (issue 31 item 1): a Docker image with `WORKDIR /app` builds in /app/build, whose 10
# characters are fewer than those of the Python module's install RUNPATH ($ORIGIN/../../.., 16):
# `./build.sh install` and `./build.sh package` failed there ("The replacement path is too long
# for the RUNPATH entry"), and CI, whose checkout path is long, never saw it.
#
# Clones SOURCE_DIR into /tmp/pXXXX (plus the working tree's uncommitted changes and untracked,
# not ignored files, so a change is tested before its commit), builds there with BUILD_DIR=b —
# only what is installed and packaged: no tests, no Go or Rust binding, the library as a unity
# build at -O0 — then `./build.sh install PREFIX` and `./build.sh package`, and checks: the build tree's
# module path is shorter than the RUNPATH it gets (else this test proves nothing); the installed
# and the packaged module's RUNPATH is $ORIGIN/../../..; the installed module imports with
# /usr/bin/python3 from its prefix and finds libpstate through it; the four .deb files exist; the
# installed pstate.pc of this prefix (not a loader directory) carries the rpath (item 2), and a C
# program built with it runs without LD_LIBRARY_PATH. Exit 77 (skipped) outside a git checkout
# or without git.
set -euo pipefail
SRC=$(cd "${1:?usage: test_short_path.sh SOURCE_DIR}" && pwd)
fail() { echo "test_short_path.sh: FAIL: $*" >&2; exit 1; }
command -v git >/dev/null || { echo "test_short_path.sh: no git: skipped"; exit 77; }
git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1 || { echo "test_short_path.sh: $SRC is not a git checkout: skipped"; exit 77; }

# PSTATE_SHORT_PATH_DIR (a new, short directory) instead of a fresh /tmp/pXXXX: a rerun at the
# same path hits ccache. Kept after a failure when PSTATE_SHORT_PATH_KEEP=1.
DIR=${PSTATE_SHORT_PATH_DIR:-$(mktemp -d /tmp/pXXXX)}
mkdir -p "$DIR"
[ -z "$(ls -A "$DIR")" ] || fail "$DIR is not empty"
trap 'rc=$?; [ "$rc" -ne 0 ] && [ "${PSTATE_SHORT_PATH_KEEP:-0}" = 1 ] || rm -rf "$DIR"' EXIT
trap 'echo "test_short_path.sh: FAIL: line $LINENO: $BASH_COMMAND" >&2' ERR
t0=$(date +%s)
git clone --quiet --no-hardlinks "$SRC" "$DIR"
# The working tree as it is now: changes to tracked files, then untracked files that are not ignored.
(cd "$SRC" && git diff --binary HEAD) | (cd "$DIR" && git apply --allow-empty --whitespace=nowarn)
(cd "$SRC" && git ls-files -z --others --exclude-standard | tar --null -T - -cf -) | tar -xf - -C "$DIR"

cd "$DIR"
export BUILD_DIR=b
# -O0: what this test checks (paths, RUNPATHs, packages) does not depend on optimisation, and the
# build is most of its time (the unity library and the SWIG wrapper at -O3: ~190 CPU-s; at -O0 ~half).
export CMAKE_ARGS="-DPSTATE_BUILD_TESTS=OFF -DPSTATE_BUILD_GO=OFF -DPSTATE_BUILD_RUST=OFF -DPSTATE_UNITY_BUILD=ON
  -DCMAKE_C_FLAGS_RELEASE=-O0 -DCMAKE_CXX_FLAGS_RELEASE=-O0"
PREFIX="$DIR/prefix"
./build.sh install "$PREFIX" >install.log 2>&1 || { tail -40 install.log; fail "./build.sh install $PREFIX failed in $DIR"; }
t1=$(date +%s)

module=$(ls b/bindings/python/pstate/_capi*.so 2>/dev/null | head -1)
[ -n "$module" ] || fail "no Python module built in $DIR/b (the Python binding is needed: swig, python3-dev)"
runpath() { readelf -d "$1" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p'; }
build_rpath=$(runpath "$module" | sed 's/:*$//')
want='$ORIGIN/../../..'
[ "${#build_rpath}" -lt "${#want}" ] || fail "the build tree's RUNPATH '$build_rpath' is not shorter than '$want': this path does not test the case"

installed=$(ls "$PREFIX"/lib/python3*/dist-packages/pstate/_capi*.so 2>/dev/null | head -1)
[ -n "$installed" ] || fail "./build.sh install put no Python module under $PREFIX/lib/python3*/dist-packages"
[ "$(runpath "$installed")" = "$want" ] || fail "installed module's RUNPATH is '$(runpath "$installed")', not $want"
(cd / && env -u LD_LIBRARY_PATH PYTHONPATH="$(dirname "$(dirname "$installed")")" /usr/bin/python3 -c \
  'import pstate, sys; sys.exit(0 if pstate.__file__.startswith(sys.argv[1]) else 1)' "$PREFIX") ||
  fail "the installed module does not import from $PREFIX"

# Item 2: the prefix is not a loader directory, so pstate.pc gives the rpath; the program starts.
grep -q "is not a directory the dynamic loader searches" install.log || fail "./build.sh install did not say that $PREFIX/lib needs an rpath"
pc=$(find "$PREFIX" -path "*/pkgconfig/pstate.pc" | head -1)
[ -n "$pc" ] || fail "no pstate.pc under $PREFIX"
printf '#include <pstate/pstate.h>\n#include <stdio.h>\nint main(void) { puts(pstate_status_string(PSTATE_OK)); return 0; }\n' >app.c
# shellcheck disable=SC2046
cc app.c $(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs pstate) -o app || fail "cc with $pc failed"
env -u LD_LIBRARY_PATH ./app >/dev/null || fail "a program built with $pc does not start without LD_LIBRARY_PATH"

./build.sh package >package.log 2>&1 || { tail -40 package.log; fail "./build.sh package failed in $DIR"; }
t2=$(date +%s)
for p in libpstate1 libpstate-dev pstate python3-pstate; do
  ls b/"${p}"_*.deb >/dev/null 2>&1 || fail "./build.sh package made no $p package"
done
mkdir x && dpkg-deb -x b/python3-pstate_*.deb x
[ "$(runpath x/usr/lib/python3/dist-packages/pstate/_capi*.so)" = "$want" ] || fail "packaged module's RUNPATH is not $want"
dpkg-deb -x b/libpstate-dev_*.deb x
! grep -q rpath x/usr/lib/*/pkgconfig/pstate.pc x/usr/lib/pkgconfig/pstate.pc 2>/dev/null || fail "libpstate-dev's pstate.pc has an rpath"
echo "test_short_path.sh: PASSED in $DIR (build RUNPATH '$build_rpath', ${#build_rpath} < ${#want} characters):" \
  "clone + build + install $((t1 - t0)) s, package $((t2 - t1)) s"
