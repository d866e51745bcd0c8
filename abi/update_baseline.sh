#!/usr/bin/env bash
# abi/update_baseline.sh — regenerates the ABI baseline, abi/libpstate.so.<major>.abi, from this
# checkout: the one command after a reviewed change of pstate.h that the gate (abi/check.sh)
# would otherwise refuse — the 1.0 reshaping of the conventions, or a deliberate break together
# with its SONAME bump (the old major's baseline is removed then). It builds the same probe as
# the gate (src/ files that define PSTATE_API functions, -O0 -g, the version script; see
# abi/check.sh) and writes abidw's description of it. Commit the file with the change; its diff
# is the ABI's diff. Needs abigail-tools (./build.sh deps) and a C++ compiler (CXX).
#
#   abi/update_baseline.sh [--work DIR]     (default work folder: build/abi)
set -euo pipefail
exec "$(dirname "$0")/check.sh" --update "$@"
