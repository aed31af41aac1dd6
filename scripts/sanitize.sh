#!/usr/bin/env bash
# Builds and tests under the sanitizers (docs/STYLE.md: sanitizer builds must pass the test suite):
#   asan  build-asan/, -DSANITIZE=address,undefined: the full ctest suite, integration tests
#         (real daemons on loopback) included. Leaks and every UBSan report fail the run.
#   tsan  build-tsan/, -DSANITIZE=thread: the full ctest suite, integration tests included
#         (TSan-built daemons). Debian's Abseil, gRPC and UCX are not TSan-instrumented, so: our own
#         locks are scd::Mutex (common/base/mutex.h), which under TSan is a pthread mutex TSan
#         sees instead of absl::Mutex; what the uninstrumented libraries do inside themselves is
#         ignored (ignore_noninstrumented_modules=1), our code's accesses are all checked; UCX's
#         memory hooks (libucm) are off, since they crash TSan at thread exit; OpenBLAS runs
#         on one thread (its pool is uninstrumented too); test_loadgen runs with the cpp-httplib
#         suppressions. tests/sanitizers/README.md lists what each run covers and why.
# Both build dirs are reused (cmake is re-run, nothing is deleted). Builds at -O1 -g without
# NDEBUG, so assert()s stay on.
#
# Usage: scripts/sanitize.sh [asan|tsan|all] [extra ctest arguments]   (default: all)
# Environment: JOBS (build jobs, default 2), SCD_CUDA (default OFF: the sanitizers run the
# CPU path), ASAN_BUILD_DIR (default build-asan), TSAN_BUILD_DIR (default build-tsan).
set -euo pipefail

cd "$(dirname "$0")/.."
WHICH="${1:-all}"
shift || true
JOBS="${JOBS:-2}"
SCD_CUDA="${SCD_CUDA:-OFF}"
ASAN_BUILD_DIR="${ASAN_BUILD_DIR:-build-asan}"
TSAN_BUILD_DIR="${TSAN_BUILD_DIR:-build-tsan}"
SUPP="$(pwd)/tests/sanitizers"
# Test binaries that run with tests/sanitizers/tsan_httplib.supp (see the TSan step below).
TSAN_HTTPLIB='^test_loadgen$'

step() { printf '\n==> %s\n' "$*"; }
run() { printf '+'; printf ' %q' "$@"; printf '\n'; "$@"; }

configure() {
  local dir="$1" sanitize="$2"
  step "configuring ${dir}/ (SANITIZE=${sanitize}, -O1 -g, SCD_CUDA=${SCD_CUDA})"
  run cmake -S . -B "${dir}" -G Ninja -DSANITIZE="${sanitize}" -DSCD_CUDA="${SCD_CUDA}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g" \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g"
}

status=0
if [[ "${WHICH}" == asan || "${WHICH}" == all ]]; then
  configure "${ASAN_BUILD_DIR}" address,undefined
  step "building ${ASAN_BUILD_DIR}/ with ${JOBS} jobs"
  run cmake --build "${ASAN_BUILD_DIR}" -j"${JOBS}"
  # The environment reaches the daemons that the integration tests start, too.
  ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1"
  export ASAN_OPTIONS="${ASAN_OPTIONS}:strict_string_checks=1"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
  step "testing ${ASAN_BUILD_DIR}/ under ASan+UBSan"
  echo "ASAN_OPTIONS=${ASAN_OPTIONS}"
  echo "UBSAN_OPTIONS=${UBSAN_OPTIONS}"
  SECONDS=0
  run ctest --test-dir "${ASAN_BUILD_DIR}" --output-on-failure "$@" || status=1
  echo "asan: ctest took ${SECONDS} s, $([[ ${status} == 0 ]] && echo passed || echo FAILED)"
  unset ASAN_OPTIONS UBSAN_OPTIONS
fi

if [[ "${WHICH}" == tsan || "${WHICH}" == all ]]; then
  configure "${TSAN_BUILD_DIR}" thread
  # Every test binary and what it needs (both daemons included); the bench tools are not built,
  # except the GPU benchmark's CPU builds that script tests run. A test whose name is not a
  # target (a script, or the emulator test run in reverse order) needs only those.
  mapfile -t tsan_tests < <(
    {
      ctest --test-dir "${TSAN_BUILD_DIR}" -N | sed -n 's/^ *Test *#[0-9]*: *//p'
      printf '%s\n' scd-gpu-bench-host scd-gpu-bench-emu
    } | grep -Fxf <(ninja -C "${TSAN_BUILD_DIR}" -t targets all | sed -n 's/: phony$//p'))
  step "building ${#tsan_tests[@]} test binaries in ${TSAN_BUILD_DIR}/ with ${JOBS} jobs"
  run cmake --build "${TSAN_BUILD_DIR}" -j"${JOBS}" --target "${tsan_tests[@]}"
  # OpenBLAS's own worker threads synchronise with spin flags in the uninstrumented library,
  # so every sgemm result read by our code would be a reported race. One BLAS thread keeps
  # the work on the calling thread; our own threads (ParallelFor and the rest) are unchanged.
  export OPENBLAS_NUM_THREADS=1
  # libucm (UCX's mmap/madvise hooks) runs at thread exit, after TSan has torn down the
  # thread's state, and crashes it; the hooks only serve UCX's registration cache.
  export UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=no UCX_MEM_EVENTS=no
  # gRPC's and Abseil's own threads touch memory inside those uninstrumented libraries
  # (e.g. absl's GraphCycles from gRPC's event engine and timer threads); TSan sees that only
  # through its interceptors (memmove) and reports it as races between library threads.
  # Ignoring interceptors called from uninstrumented modules drops exactly those; every
  # access made by our instrumented code is still checked.
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1"
  step "testing ${TSAN_BUILD_DIR}/ under TSan"
  echo "OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS} UCX_MEM_MMAP_HOOK_MODE=${UCX_MEM_MMAP_HOOK_MODE}"
  echo "TSAN_OPTIONS=${TSAN_OPTIONS}"
  SECONDS=0
  tsan_status=0
  run ctest --test-dir "${TSAN_BUILD_DIR}" --output-on-failure \
    -E "${TSAN_HTTPLIB}" "$@" || tsan_status=1
  # The HTTP client from many threads: reports through Debian's uninstrumented cpp-httplib
  # are suppressed (tests/sanitizers/tsan_httplib.supp says which and why).
  export TSAN_OPTIONS="${TSAN_OPTIONS}:suppressions=${SUPP}/tsan_httplib.supp"
  echo "TSAN_OPTIONS=${TSAN_OPTIONS}"
  run ctest --test-dir "${TSAN_BUILD_DIR}" --output-on-failure -R "${TSAN_HTTPLIB}" "$@" \
    || tsan_status=1
  echo "tsan: ctest took ${SECONDS} s, $([[ ${tsan_status} == 0 ]] && echo passed || echo FAILED)"
  [[ ${tsan_status} == 0 ]] || status=1
fi

if [[ "${WHICH}" != asan && "${WHICH}" != tsan && "${WHICH}" != all ]]; then
  echo "usage: scripts/sanitize.sh [asan|tsan|all] [ctest arguments]" >&2
  exit 2
fi
exit "${status}"
