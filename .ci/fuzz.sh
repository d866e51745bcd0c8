#!/usr/bin/env bash
# .ci/fuzz.sh — CI's fuzzing job: builds the libFuzzer targets with clang (ASan+UBSan), replays
# the committed corpus (tests/fuzz/corpus/), then fuzzes each target for FUZZ_SECONDS (default
# 15: a smoke run; the long runs are in docs/history.md), building and fuzzing two at a time. A crash
# fails the job and leaves the input in build-fuzz/crashes/; add it to tests/fuzz/corpus/<target>/
# with the fix. See tests/fuzz/fuzz.sh and TESTING.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export FUZZ_SECONDS=${FUZZ_SECONDS:-15} FUZZ_PARALLEL=${FUZZ_PARALLEL:-2} FUZZ_NICE=${FUZZ_NICE:-0}
exec tests/fuzz/fuzz.sh ci
