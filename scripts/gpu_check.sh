#!/usr/bin/env bash
# gpu_check.sh OUTDIR: the one-shot GPU check, sized for a short device run
# (< 8 minutes on an H200 with 16 cores). It
#   1. records the device (nvidia-smi),
#   2. either takes the prebuilt binaries of .gpu_bundle/scd-gpu-bundle.tar.gz (made by
#      scripts/gpu_bundle.sh on a machine with our build dependencies, for a GPU machine that
#      lacks them; it checks the bundle's source sums against this tree and flags a stale one),
#      or configures a CUDA build (Release, Ninja, -DSCD_CUDA=ON: sm_80 and sm_90, never
#      native) in build-gpu/ and builds only what it runs (test_cuda, scd-gpu-bench),
#   3. runs the parity cases of the kernels no device has run yet one process each (first
#      contact: a fault that kills a CUDA context costs one verdict), then every [cuda] Catch2
#      test (kernel-vs-CPU-twin parity, golden stories260K, CPU-vs-CUDA backend parity) but the
#      first-contact cases that failed, and fails if any of them skipped although a device is
#      present,
#   4. runs scd-gpu-bench (cuBLAS GEMM peak, copy bandwidth, kernels alone against their
#      alternatives: small-batch Linear vs cuBLAS, the two prefill and the two decode attention
#      kernels, the SEKV zoom-in with its bases on the device and pinned; prefill TFLOP/s at
#      1K/4K/16K with each tensor-core attention kernel, decode tok/s at batch 1/32 (at batch 1
#      also with cuBLAS projections), SCD rebuild vs prefill at 4K, SEKV vs full-KV decode step at
#      32K/128K, on Mistral-7B and Llama-3-8B shapes, random device weights; and where the 4K
#      prefill's and a batch-1 decode step's device time goes, operation class by class),
#   5. runs compute-sanitizer memcheck and racecheck over the kernel-level parity tests,
# and writes every log plus results.json / results.md / summary.txt into OUTDIR.
# Environment: JOBS (default 16), SCD_GPU_BUILD_DIR (default <repo>/build-gpu), SCD_GPU_BUNDLE
# (default <repo>/.gpu_bundle/scd-gpu-bundle.tar.gz; build from source when it is absent),
# BENCH_ARGS (extra scd-gpu-bench flags, e.g. "--prefill 1024,4096"), SANITIZE_SECONDS
# (limit of each compute-sanitizer run, default 75), SCD_GPU_TEST_BIN (a test binary to run in
# place of test_cuda: for checking this script's handling of failures, bundle_check.sh).
# Through the device tool, which returns at most 8 files from $OUT (docs/GPU.md):
#   bash scripts/gpu_check.sh /tmp/gpu; rc=$?; tar -C /tmp -czf $OUT/gpu.tgz gpu; exit $rc
set -uo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: scripts/gpu_check.sh OUTDIR" >&2
  exit 2
fi
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${SCD_GPU_BUILD_DIR:-$ROOT/build-gpu}
JOBS=${JOBS:-16}
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
START=$SECONDS

step() { echo "== [$((SECONDS - START))s] $*" | tee -a "$SUMMARY"; }
note() { echo "   $*" | tee -a "$SUMMARY"; }
# The directory that holds shared library $1: CUDA's usual prefixes, then the loader's cache,
# then a search of /usr and /opt (pip's nvidia-* wheels put cuBLAS under site-packages).
find_lib_dir() {
  local d sub
  for d in ${CUDA_HOME:-} /usr/local/cuda /usr/local/cuda-13*; do
    for sub in lib64 lib targets/x86_64-linux/lib; do
      [[ -e "$d/$sub/$1" ]] && { echo "$d/$sub"; return; }
    done
  done
  d=$(ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n {print $NF; exit}')
  [[ -n "$d" ]] && { dirname "$d"; return; }
  d=$(find /usr /opt -name "$1" -print -quit 2>/dev/null)
  [[ -n "$d" ]] && dirname "$d"
}

step "device: nvidia-smi > $OUT/nvidia-smi.txt"
if nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1; then
  note "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null)"
else
  note "nvidia-smi failed (see nvidia-smi.txt); continuing, the tests will say whether CUDA works"
fi

BUNDLE=${SCD_GPU_BUNDLE:-$ROOT/.gpu_bundle/scd-gpu-bundle.tar.gz}
STALE=0
if [[ -f "$BUNDLE" ]]; then
  # Prebuilt binaries (scripts/gpu_bundle.sh): for a GPU machine without our build dependencies.
  B=$BUILD/bundle
  step "prebuilt: unpacking $BUNDLE into $B"
  rm -rf "$B" && mkdir -p "$B"
  if ! tar -C "$B" -xzf "$BUNDLE"; then
    note "FAILED: cannot unpack $BUNDLE"
    exit 1
  fi
  while read -r line; do note "bundle $line"; done < "$B/MANIFEST"
  if (cd "$ROOT" && sha256sum --quiet -c "$B/SOURCES.sha256" > "$B/stale.txt" 2>&1); then
    note "bundle sources match this tree"
  else
    STALE=1
    note "STALE: the bundle was built from other sources; results are flagged. Differences:"
    head -5 "$B/stale.txt" | while read -r line; do note "  $line"; done
  fi
  CUBLAS_DIR=$(find_lib_dir libcublasLt.so.13)
  note "cuBLAS 13 from: ${CUBLAS_DIR:-the default library paths (no libcublasLt.so.13 found)}"
  export LD_LIBRARY_PATH="$B/lib${CUBLAS_DIR:+:$CUBLAS_DIR}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  TEST_BIN=$B/bin/test_cuda
  BENCH_BIN=$B/bin/scd-gpu-bench
  if ! "$TEST_BIN" --help > /dev/null 2>&1; then
    # This machine's C++ runtime is older than the one the bundle was built with.
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$B/lib/compat"
    note "using the bundle's libstdc++ (lib/compat)"
  fi
  if ! "$TEST_BIN" --help > /dev/null 2>&1; then
    ldd "$TEST_BIN" "$BENCH_BIN" > "$OUT/ldd.txt" 2>&1
    grep "not found" "$OUT/ldd.txt" | sort -u | while read -r line; do note "$line"; done
    note "FAILED: the prebuilt binaries do not load here (see ldd.txt; LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
    exit 1
  fi
  export SCD_SHARED_DIR=$B/shared SCD_SOURCE_DIR=$ROOT
else
  step "configure: cmake -S $ROOT -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DSCD_CUDA=ON"
  if ! cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSCD_CUDA=ON \
      > "$OUT/configure.log" 2>&1; then
    tail -20 "$OUT/configure.log"
    note "FAILED: configure (see configure.log). A machine without the build dependencies"
    note "(gRPC, absl, OpenBLAS, Catch2) needs a bundle: run scripts/gpu_bundle.sh where they are."
    exit 1
  fi

  step "build: cmake --build $BUILD --target test_cuda scd-gpu-bench -j $JOBS (log: build.log)"
  if ! timeout 330 cmake --build "$BUILD" --target test_cuda scd-gpu-bench -j "$JOBS" \
      > "$OUT/build.log" 2>&1; then
    grep -E "error|FAILED" "$OUT/build.log" | head -20
    note "FAILED: build (see build.log)"
    exit 1
  fi
  note "warnings in build: $(grep -c 'warning' "$OUT/build.log" || true)"
  TEST_BIN=$BUILD/tests/test_cuda
  BENCH_BIN=$BUILD/bin/scd-gpu-bench
fi

# First contact: the parity cases of the kernels no device has run yet, each in a process of
# its own and before everything else. A fault that kills its process's CUDA context (an illegal
# address or instruction) then costs that case's verdict only, not every case and figure after
# it. A case that fails is left out of the full run below; where the benchmark can do without
# its kernel, the benchmark leaves it out too (the mma.sync prefill: --skip-mma; the device
# zoom-in: the SEKV parts that run it). Patterns end in "*" where a name holds a comma, which
# Catch2 would read as "or"; a pattern that matches no case fails (--warn NoTests).
FIRST_CONTACT=(
  "mma.sync prefill attention|CUDA tensor-core prefill attention matches cpu::CausalAttention"
  "vectorized decode attention|CUDA split-K decode attention matches cpu::CausalAttention"
  "vectorized SEKV attention|CUDA SekvAttention matches one blockwise softmax over mixed segments"
  "SEKV zoom-in|CUDA SekvZoom matches SelectSpans*"
  "SEKV zoom-in|CUDA SekvZoom with bases past its shared staging and more candidates than threads"
  "weight-stream projections|CUDA LinearSmallBatch matches cpu::Linear for every m it takes"
)
# Adds each flag to BENCH_ARGS once.
bench_without() {
  local flag
  for flag in "$@"; do
    [[ " ${BENCH_ARGS:-} " == *" $flag "* ]] || BENCH_ARGS="${BENCH_ARGS:-} $flag"
  done
}
if [[ -n "${SCD_GPU_TEST_BIN:-}" ]]; then
  TEST_BIN=$SCD_GPU_TEST_BIN
  note "test binary: $TEST_BIN (SCD_GPU_TEST_BIN)"
fi
step "first contact: the kernels no device has run, a process each (log: first_contact.log)"
: > "$OUT/first_contact.log"
FIRST_RC=0
TEST_SPEC="[cuda]"
for entry in "${FIRST_CONTACT[@]}"; do
  kernel=${entry%%|*}
  name=${entry#*|}
  echo "== $name" >> "$OUT/first_contact.log"
  timeout 30 "$TEST_BIN" "$name" --warn NoTests > "$OUT/first_contact.case" 2>&1
  rc=$?
  cat "$OUT/first_contact.case" >> "$OUT/first_contact.log"
  if [[ $rc -eq 0 ]] && grep -q "no CUDA device: skipping" "$OUT/first_contact.case"; then
    note "skipped: $kernel (no usable CUDA device)"
    continue
  elif [[ $rc -eq 0 ]]; then
    note "ok: $kernel ($name)"
    continue
  fi
  note "FAILED (exit $rc): $kernel ($name); left out of the full run"
  FIRST_RC=$rc
  TEST_SPEC="$TEST_SPEC~\"$name\""
  case $kernel in
    "mma.sync prefill attention")
      # kAuto never takes it; only this backend case runs it besides its own.
      TEST_SPEC="$TEST_SPEC~\"CUDA backend gives the CPU backend's logits with every kernel choice\""
      bench_without --skip-mma
      ;;
    "SEKV zoom-in") bench_without --skip-sekv-model --skip-sekv-batch ;;
    *) note "  the benchmark still runs it: kAuto takes it (pin another with cuda_kernels.*)" ;;
  esac
done
rm -f "$OUT/first_contact.case"

step "test: $TEST_BIN '$TEST_SPEC' --durations yes (log: test_cuda.log)"
timeout 180 "$TEST_BIN" "$TEST_SPEC" --durations yes > "$OUT/test_cuda.log" 2>&1
TEST_RC=$?
if [[ $TEST_RC -eq 0 && $FIRST_RC -ne 0 ]]; then TEST_RC=$FIRST_RC; fi
tail -4 "$OUT/test_cuda.log" | tee -a "$SUMMARY"
SKIPPED=$(grep -c "no CUDA device: skipping" "$OUT/test_cuda.log" || true)
if [[ $TEST_RC -eq 0 && $SKIPPED -gt 0 ]]; then
  note "FAILED: $SKIPPED [cuda] tests skipped: no usable CUDA device"
  TEST_RC=3
fi
note "test_cuda exit code $TEST_RC"

step "bench: $BENCH_BIN --out $OUT ${BENCH_ARGS:-} (log: bench.log)"
# shellcheck disable=SC2086
timeout 280 "$BENCH_BIN" --out "$OUT" ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
BENCH_RC=$?
grep -E "\] kernels: |vs_gemm_peak=|vs_copy=|scd_rebuild_speedup=|_vs_full=|_vs_one_by_one=|_vs_two_steps=|small_batch_vs_cublas=|mma_vs_wmma=|vectorized_vs_generic=|zoom_pinned_vs_device=|zoom_bus_vs_copy=|_time_by_op=" \
  "$OUT/bench.log" \
  | tee -a "$SUMMARY"
note "scd-gpu-bench exit code $BENCH_RC (results: results.json, results.md)"
# A benchmark that stopped says why on its last "scd-gpu-bench: " line: no usable device (no
# driver, a driver older than the build's CUDA runtime, none visible), a bad flag, an error.
if [[ $BENCH_RC -ne 0 && $BENCH_RC -ne 124 ]]; then
  WHY=$(grep "^scd-gpu-bench: " "$OUT/bench.log" | tail -1)
  note "${WHY:-$(tail -1 "$OUT/bench.log")}"
fi

# compute-sanitizer (memcheck, then racecheck) over the kernel-level parity tests, whose shapes
# are small; last, so that it never costs the figures above their time. Errors fail the check;
# a run cut short by its time limit is reported as incomplete.
SAN_RC=0
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
SAN_TESTS="[#attention_test],[#ops_test],[#scd_codec_test],[#sekv_kernels_test],[#sampling_test]"
for tool in memcheck racecheck; do
  if [[ -z "$SANITIZER" ]]; then
    note "compute-sanitizer not found: $tool skipped"
    break
  fi
  if ((SECONDS - START > 400)); then
    note "$tool skipped: $((SECONDS - START))s spent, keeping the run under 8 minutes"
    break
  fi
  step "sanitize: compute-sanitizer --tool $tool $TEST_BIN -# '$SAN_TESTS' (log: $tool.log)"
  timeout "${SANITIZE_SECONDS:-75}" "$SANITIZER" --tool "$tool" --error-exitcode 99 \
    "$TEST_BIN" -# "$SAN_TESTS" > "$OUT/$tool.log" 2>&1
  rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/$tool.log" | tail -1 | while read -r line; do
    note "$line"
  done
  if [[ $rc -eq 124 ]]; then
    note "$tool incomplete: stopped after ${SANITIZE_SECONDS:-75}s"
  elif [[ $rc -ne 0 ]]; then
    note "FAILED: $tool exit code $rc (see $tool.log)"
    SAN_RC=$rc
  fi
done

step "done in $((SECONDS - START))s: logs and results in $OUT"
if [[ $TEST_RC -ne 0 || $BENCH_RC -ne 0 || $SAN_RC -ne 0 ]]; then
  note "FAILED (test $TEST_RC, bench $BENCH_RC, sanitizer $SAN_RC)"
  exit 1
fi
if [[ $STALE -ne 0 ]]; then
  note "OK, but from a STALE bundle: rebuild it (scripts/gpu_bundle.sh) before quoting results"
  exit 1
fi
note "OK"
