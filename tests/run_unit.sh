#!/usr/bin/env bash
# Fast iteration: configure + build, then the Criterion unit tests via
# ctest -L unit (no downloads needed).
#
#   tests/run_unit.sh [CTEST ARGS...]      e.g. tests/run_unit.sh -R test_ir
#
# Environment: OQ_BUILD_DIR (default <repo>/build), OQ_CMAKE_ARGS (extra
# cmake arguments, e.g. "-DONNXQ_SANITIZE=ON"), OQ_JOBS (default nproc).
# Exit status is ctest's (non-zero when a test fails or the build breaks).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${OQ_BUILD_DIR:-$root/build}
jobs=${OQ_JOBS:-$(nproc 2>/dev/null || echo 2)}
# shellcheck disable=SC2086 # OQ_CMAKE_ARGS is a list of words on purpose
cmake -S "$root" -B "$build" ${OQ_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" -L unit --output-on-failure -j "$jobs" "$@"
