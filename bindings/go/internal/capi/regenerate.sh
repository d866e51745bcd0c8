#!/bin/sh
# regenerate.sh — writes capi.go and capi_wrap.c, the raw layer of the Go binding, with SWIG (4.x)
# from bindings/pstate.i. Both are committed, so the module builds anywhere without SWIG and
# without this source tree around it (a copy, a `replace` path); bindings/go/bindings_go.cmake's
# bindings_go_drift runs this into a temporary folder and fails when the committed files differ
# (pstate.h or pstate.i changed without them). capi.go is formatted with gofmt.
#
#   ./regenerate.sh          rewrite capi.go and capi_wrap.c here
#   ./regenerate.sh DIR      write them into DIR (the drift test)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "${1:-$here}" && cd "${1:-$here}" && pwd)
# From bindings/, with relative paths: SWIG writes its input's path into capi.go.
cd "$here/../../.."
${SWIG:-swig} -go -cgo -intgosize 64 -module capi -I../include -outdir "$out" -o "$out/capi_wrap.c" pstate.i
${GOFMT:-gofmt} -w "$out/capi.go"
