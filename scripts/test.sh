#!/usr/bin/env bash
# Runs the whole test suite through ctest, building first (incrementally; configuring first
# when build/ has never been configured). Extra arguments go to ctest, e.g. `-R test_model`
# or `-V`. The tests read fixtures from ../shared (see ../shared/README.md).
# Environment: BUILD_DIR (default build), JOBS (build jobs, default nproc), CTEST_JOBS (default
# 2: only the GPU emulator's single-threaded suites run beside each other; every other test
# runs alone, RUN_SERIAL in tests/CMakeLists.txt).
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
JOBS="${JOBS:-$(nproc)}"

run() { printf '+'; printf ' %q' "$@"; printf '\n'; "$@"; }

if [[ ! -d ../shared/models ]]; then
  echo "test.sh: warning: fixtures not found at $(cd .. && pwd)/shared; fixture tests will fail" >&2
fi
if [[ ! -f "${BUILD_DIR}/CMakeCache.txt" ]]; then
  printf '==> configuring %s/ (Release)\n' "${BUILD_DIR}"
  run cmake -S . -B "${BUILD_DIR}" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
printf '==> building %s/\n' "${BUILD_DIR}"
run cmake --build "${BUILD_DIR}" -j"${JOBS}"
printf '==> testing\n'
run ctest --test-dir "${BUILD_DIR}" --output-on-failure -j"${CTEST_JOBS:-2}" "$@"
