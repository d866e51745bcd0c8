#!/usr/bin/env bash
# test_deb.sh BUILD_DIR — the Debian packages, as a user meets them (issue 16).
#
# Builds the packages of BUILD_DIR with cpack (cmake/packaging.cmake), checks what each carries,
# then, in a throwaway root — this machine's own filesystem under an overlay whose upper layer is
# a tmpfs, in a private mount namespace, so nothing reaches the real / — installs them with
# `apt-get install ./*.deb` (dependencies from what the machine has), uses each one (the `pstate`
# command, a C program built with pkg-config and run as one rank, a CMake find_package project,
# `import pstate` with Debian's python3 as two ranks under `pstate run`), removes them with
# `apt-get purge`, and checks that nothing of pstate is left; then, in the same root, what
# `./build.sh install` does (cmake --install --prefix /usr/local, ldconfig) and `import pstate`
# with /usr/bin/python3 from /. Needs root (mount namespaces);
# exits 77 (ctest: skipped) without it.
set -euo pipefail
BUILD=$(cd "${1:?usage: test_deb.sh BUILD_DIR}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "test_deb.sh: needs root (mount namespace, overlay): skipped"; exit 77; }

WORK=$(mktemp -d /tmp/pstate-deb.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "test_deb.sh: FAIL: $*" >&2; exit 1; }
# The runtime package is named after the SONAME: libpstate.so.<major> is in libpstate<major>.
MAJOR=$(sed -n 's/^#define PSTATE_VERSION_MAJOR \([0-9][0-9]*\)$/\1/p' "$SRC/include/pstate/pstate.h")
[ -n "$MAJOR" ] || fail "no PSTATE_VERSION_MAJOR in $SRC/include/pstate/pstate.h"
RT=libpstate$MAJOR

# ---- build and inspect ------------------------------------------------------------------------
(cd "$WORK" && cpack --config "$BUILD/CPackConfig.cmake" -B "$WORK/out" >"$WORK/cpack.log" 2>&1) ||
  { cat "$WORK/cpack.log"; fail "cpack -G DEB failed"; }
mkdir -p "$WORK/debs"
mv "$WORK"/out/*.deb "$WORK/debs/"
ls "$WORK/debs"
deb() { ls "$WORK"/debs/"$1"_*.deb 2>/dev/null | head -1; }
for p in "$RT" libpstate-dev pstate python3-pstate; do [ -n "$(deb "$p")" ] || fail "no $p package"; done

contents() { dpkg-deb --contents "$(deb "$1")" | awk '{print $6}'; }
has() { contents "$1" | grep -qE "$2" || fail "$1 lacks $2"; }
lacks() { ! contents "$1" | grep -qE "$2" || fail "$1 should not carry $2"; }
has "$RT" "^\\./usr/lib/libpstate\\.so\\.$MAJOR(\\.|\$)"
lacks "$RT" '/libpstate\.so$|/include/'
has libpstate-dev '^\./usr/include/pstate/pstate\.h$'
has libpstate-dev '^\./usr/lib/libpstate\.so$'
has libpstate-dev '^\./usr/lib/pkgconfig/pstate\.pc$'
has libpstate-dev '^\./usr/lib/cmake/pstate/pstateConfig\.cmake$'
has pstate '^\./usr/bin/pstate$'
has python3-pstate '^\./usr/lib/python3/dist-packages/pstate/__init__\.py$'
has python3-pstate '^\./usr/lib/python3/dist-packages/pstate/_capi.*\.so$'
field() { dpkg-deb --field "$(deb "$1")" "$2"; }
field "$RT" Depends | grep -q libucx0 || fail "$RT does not depend on libucx0: $(field "$RT" Depends)"
field "$RT" Depends | grep -q libssl3 || fail "$RT does not depend on libssl3 (libcrypto, the store's HMAC): $(field "$RT" Depends)"
field libpstate-dev Depends | grep -q "$RT (= " || fail "libpstate-dev: $(field libpstate-dev Depends)"
field python3-pstate Depends | grep -q "$RT (= " || fail "python3-pstate: $(field python3-pstate Depends)"
field python3-pstate Depends | grep -q "python3" || fail "python3-pstate: $(field python3-pstate Depends)"
echo "test_deb.sh: 4 packages, contents and dependencies as documented"

# ---- the throwaway root -----------------------------------------------------------------------
cp "$SRC/tests/consumers/consumer.c" "$WORK/debs/"
cat >"$WORK/debs/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.20)
project(deb_consumer C)
find_package(pstate CONFIG REQUIRED)
add_executable(consumer consumer.c)
target_link_libraries(consumer PRIVATE pstate::pstate)
EOF
cat >"$WORK/debs/two_ranks.py" <<'EOF'
import numpy as np
import pstate

with pstate.init() as ps:
    x = np.full(4, ps.rank + 1, dtype=np.float32)
    ps.group("world").all_reduce(x)
    assert (x == 3).all(), x
    print(f"rank {ps.rank}: all_reduce over the installed package ok")
EOF
cat >"$WORK/debs/inside.sh" <<'EOF'
set -euo pipefail
cd /pstate-debs
fail() { echo "inside the throwaway root: FAIL: $*" >&2; exit 1; }
for f in /usr/lib/libpstate.so.$MAJOR /usr/bin/pstate /usr/include/pstate; do [ ! -e "$f" ] || fail "$f exists before install"; done
DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$PWD"/${RT}_*.deb "$PWD"/libpstate-dev_*.deb \
  "$PWD"/pstate_*.deb "$PWD"/python3-pstate_*.deb >apt-install.log 2>&1 || { cat apt-install.log; fail "apt-get install"; }
echo "apt-get install ./*.deb: ok"
pstate --version
pstate layout --world 8 --tp 4 --pp 2 | head -3
cc -o consumer_pc consumer.c $(pkg-config --cflags --libs pstate) || fail "pkg-config build"
./consumer_pc || fail "pkg-config consumer"
cmake -S . -B cm >cmake.log 2>&1 && cmake --build cm >>cmake.log 2>&1 || { cat cmake.log; fail "find_package build"; }
./cm/consumer || fail "find_package consumer"
/usr/bin/python3 -c 'import pstate; print("import pstate:", pstate.__file__)' || fail "import pstate"
PSTATE_TIMEOUT_MS=30000 pstate run -n 2 -- /usr/bin/python3 two_ranks.py || fail "two Python ranks"
installed=$(dpkg -L "$RT" libpstate-dev pstate python3-pstate | grep -E 'pstate' | sort -u)
DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "$RT" libpstate-dev pstate python3-pstate \
  >apt-purge.log 2>&1 || { cat apt-purge.log; fail "apt-get purge"; }
left=$(for f in $installed; do [ ! -e "$f" ] || echo "$f"; done)
[ -z "$left" ] || fail "left after purge: $left"
dpkg -l | grep -q pstate && fail "dpkg still lists: $(dpkg -l | grep pstate)"
echo "apt-get purge: nothing of pstate left"
# ./build.sh install's step, then Debian's python3 from anywhere: the module is where it looks
cmake --install "$PSTATE_BUILD" --prefix /usr/local >install.log 2>&1 || { cat install.log; fail "cmake --install"; }
ldconfig
(cd / && /usr/bin/python3 -c 'import pstate; assert pstate.__file__.startswith("/usr/local/"), pstate.__file__;
print("after cmake --install --prefix /usr/local: import pstate from", pstate.__file__)') || fail "import after install"
EOF

unshare --mount --fork bash -s "$WORK" "$BUILD" "$SRC" "$MAJOR" <<'EOF'
set -euo pipefail
W=$1
mount --make-rprivate /
mkdir -p "$W/ovl"
mount -t tmpfs tmpfs "$W/ovl"
mkdir -p "$W/ovl/upper" "$W/ovl/work" "$W/ovl/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$W/ovl/upper,workdir=$W/ovl/work" "$W/ovl/root"
mount --rbind /dev "$W/ovl/root/dev"
mount -t proc proc "$W/ovl/root/proc"
mount -t tmpfs tmpfs "$W/ovl/root/tmp"
# The build and source trees at their own paths (cmake --install reads both; a clone under /tmp
# would be hidden by the tmpfs above).
for d in "$2" "$3"; do mkdir -p "$W/ovl/root$d" && mount --rbind "$d" "$W/ovl/root$d"; done
mkdir -p "$W/ovl/root/pstate-debs"
cp -r "$W/debs/." "$W/ovl/root/pstate-debs/"
chroot "$W/ovl/root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  PSTATE_BUILD="$2" MAJOR="$4" RT="libpstate$4" bash /pstate-debs/inside.sh
EOF
echo "test_deb.sh: install, use and purge in a throwaway root: ok"
