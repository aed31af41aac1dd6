#!/usr/bin/env bash
# Checks that every C++ and CUDA file is formatted (.clang-format, clang-format 14), then runs
# the whole test suite through ctest, building first (incrementally; configuring first when
# build/ has never been configured). Extra arguments go to ctest, e.g. `-R test_model` or `-V`.
# The tests read fixtures from ../shared (see ../shared/README.md). SCD_SKIP_FORMAT=1 skips
# the format check (e.g. while iterating on a change).
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
if [[ "${SCD_SKIP_FORMAT:-0}" == 1 ]]; then
  printf '==> skipping the format check (SCD_SKIP_FORMAT=1)\n'
elif ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  printf '==> skipping the format check (not a git checkout: no file list)\n'
else
  printf '==> checking the formatting of every C++ and CUDA file\n'
  if ! command -v clang-format-14 >/dev/null; then
    echo "test.sh: clang-format-14 not found (scripts/setup.sh installs it)" >&2
    exit 1
  fi
  if ! git ls-files -z -- '*.cc' '*.h' '*.cu' '*.cuh' |
      xargs -0 clang-format-14 --dry-run --Werror; then
    echo "test.sh: files above differ from .clang-format; run clang-format-14 -i on them" >&2
    exit 1
  fi
fi
if [[ ! -f "${BUILD_DIR}/CMakeCache.txt" ]]; then
  printf '==> configuring %s/ (Release)\n' "${BUILD_DIR}"
  run cmake -S . -B "${BUILD_DIR}" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
printf '==> building %s/\n' "${BUILD_DIR}"
run cmake --build "${BUILD_DIR}" -j"${JOBS}"
printf '==> testing\n'
run ctest --test-dir "${BUILD_DIR}" --output-on-failure -j"${CTEST_JOBS:-2}" "$@"
