#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang-14 (ASan + UBSan + libFuzzer) into
# build-fuzz/, runs each one for SECONDS_PER_TARGET (default 600) on a copy of its seed corpus,
# and prints a Markdown table: target, seconds, executions (libFuzzer's
# stat::number_of_executed_units), coverage (cov: edges / ft: features, from the last status
# line), corpus size and failures. Exits non-zero when any target crashes, leaks, times out,
# runs out of memory or triggers a UBSan report; the input that did it is kept in the work dir.
# Needs clang-14 and libclang-rt-14-dev (Debian; scripts/setup.sh installs both).
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]    (default: every target)
# Environment:
#   FUZZ_BUILD_DIR  build dir (default build-fuzz); configured and built only for the targets
#   FUZZ_WORK_DIR   work corpora, crash inputs, logs, summary.md (default $FUZZ_BUILD_DIR/work);
#                   emptied at the start of each run, so the seeds in the repo are never modified
#   FUZZ_PARALLEL   targets run at once (default 1)
#   JOBS            build jobs (default 2)
set -euo pipefail

cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${1:-600}"
shift || true
BUILD_DIR="${FUZZ_BUILD_DIR:-build-fuzz}"
WORK_DIR="${FUZZ_WORK_DIR:-${BUILD_DIR}/work}"
PARALLEL="${FUZZ_PARALLEL:-1}"
JOBS="${JOBS:-2}"

# Each target and its -max_len: a little above its largest seed, so that mutations can grow
# an input but the fuzzer does not spend its time on megabyte inputs.
declare -A MAX_LEN=(
  [safetensors_header_fuzz]=16384
  [model_config_fuzz]=4096
  [tokenizer_json_fuzz]=16384
  [bpe_fuzz]=4096
  [wire_format_fuzz]=8192
  [artifact_fuzz]=16384
  [openai_request_fuzz]=8192
  [daemon_config_fuzz]=8192
)
ALL_TARGETS=(safetensors_header_fuzz model_config_fuzz tokenizer_json_fuzz bpe_fuzz
             wire_format_fuzz artifact_fuzz openai_request_fuzz daemon_config_fuzz)
TARGETS=("$@")
[[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=("${ALL_TARGETS[@]}")

step() { printf '\n==> %s\n' "$*"; }
run() { printf '+'; printf ' %q' "$@"; printf '\n'; "$@"; }

for t in "${TARGETS[@]}"; do
  if [[ -z "${MAX_LEN[$t]:-}" ]]; then
    echo "fuzz.sh: unknown target '$t' (known: ${ALL_TARGETS[*]})" >&2
    exit 2
  fi
done
LIBFUZZER="/usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a"
if ! command -v clang++-14 >/dev/null || ! compgen -G "${LIBFUZZER}" >/dev/null; then
  echo "fuzz.sh: needs clang-14 and libFuzzer: apt-get install clang-14 libclang-rt-14-dev" >&2
  exit 1
fi

# RelWithDebInfo at -O1 without NDEBUG: fast enough to fuzz, and assert()s stay on.
step "configuring ${BUILD_DIR}/ (clang-14, SCD_FUZZ=ON: libFuzzer + ASan + UBSan)"
run env CC=clang-14 CXX=clang++-14 cmake -S . -B "${BUILD_DIR}" -G Ninja -DSCD_FUZZ=ON \
  -DSCD_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g"
step "building the fuzz targets only, ${JOBS} jobs"
run cmake --build "${BUILD_DIR}" -j"${JOBS}" --target "${TARGETS[@]}"

step "fuzzing ${#TARGETS[@]} target(s) for ${SECONDS_PER_TARGET} s each, ${PARALLEL} at a time"
run rm -rf "${WORK_DIR}"
run mkdir -p "${WORK_DIR}"
# Leaks, and every UBSan report, are failures (halt_on_error makes UBSan stop the process so
# that libFuzzer saves the input).
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:symbolize=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:symbolize=1"
echo "ASAN_OPTIONS=${ASAN_OPTIONS}"
echo "UBSAN_OPTIONS=${UBSAN_OPTIONS}"

fuzz_one() {
  local t="$1" dir="${WORK_DIR}/$1"
  mkdir -p "${dir}/artifacts"
  cp -r "tests/fuzz/corpus/${t%_fuzz}" "${dir}/corpus"
  local cmd=("${BUILD_DIR}/fuzz/${t}" "-max_total_time=${SECONDS_PER_TARGET}"
             "-max_len=${MAX_LEN[$t]}" -rss_limit_mb=2048 -timeout=30 -print_final_stats=1
             "-artifact_prefix=${dir}/artifacts/")
  [[ -f "tests/fuzz/dict/${t%_fuzz}.dict" ]] && cmd+=("-dict=tests/fuzz/dict/${t%_fuzz}.dict")
  cmd+=("${dir}/corpus")
  printf '+'; printf ' %q' "${cmd[@]}"; printf '  > %s\n' "${dir}/log"
  local rc=0
  "${cmd[@]}" >"${dir}/log" 2>&1 || rc=$?
  echo "${rc}" >"${dir}/rc"
  echo "fuzz.sh: ${t} finished, exit ${rc}"
}

running=0
for t in "${TARGETS[@]}"; do
  fuzz_one "$t" &
  running=$((running + 1))
  if (( running >= PARALLEL )); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

step "summary"
summary="${WORK_DIR}/summary.md"
failed=0
# Built in a file, not a pipe, so that `failed` is set in this shell.
{
  echo "| target | seconds | executions | exec/s | coverage (cov / ft) | corpus | crashes |"
  echo "|---|---:|---:|---:|---|---:|---|"
  for t in "${TARGETS[@]}"; do
    dir="${WORK_DIR}/${t}"
    log="${dir}/log"
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "${log}" | tail -1)"
    rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "${log}" | tail -1)"
    last="$(grep -E '^#[0-9]+.*cov: ' "${log}" | tail -1 || true)"
    cov="$(sed -n 's/.* cov: \([0-9]*\) ft: \([0-9]*\).*/\1 \/ \2/p' <<<"${last}")"
    corp="$(sed -n 's/.* corp: \([0-9]*\)\/.*/\1/p' <<<"${last}")"
    # The inputs libFuzzer saved for a failure (slow-unit- files are only slow).
    saved="$(find "${dir}/artifacts" -type f ! -name 'slow-unit-*' | wc -l)"
    rc="$(cat "${dir}/rc")"
    status="0"
    if [[ "${rc}" != 0 || "${saved}" != 0 ]] || \
       grep -qE 'runtime error:|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)' "${log}"; then
      inputs="$(find "${dir}/artifacts" -type f ! -name 'slow-unit-*' -printf '%f ' | head -c 200)"
      status="**FAILED** (exit ${rc}; ${inputs})"
      failed=1
    fi
    echo "| ${t} | ${SECONDS_PER_TARGET} | ${execs:-?} | ${rate:-?} | ${cov:-?} | ${corp:-?}" \
         "| ${status} |"
  done
} >"${summary}"
cat "${summary}"
echo
echo "command: scripts/fuzz.sh ${SECONDS_PER_TARGET}"
echo "logs, corpora and crash inputs: ${WORK_DIR}/"
if (( failed )); then
  echo "fuzz.sh: FAILED: reproduce with build-fuzz/fuzz/TARGET FILE (see the logs)" >&2
  exit 1
fi
echo "fuzz.sh: no crash, leak, timeout or UBSan report"
