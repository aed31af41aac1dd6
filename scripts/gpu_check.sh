#!/usr/bin/env bash
# gpu_check.sh OUTDIR: the one-shot GPU check of issue 7, sized for a short device run
# (< 8 minutes on an H200 with 16 cores). It
#   1. records the device (nvidia-smi),
#   2. configures a CUDA build (Release, Ninja, -DSCD_CUDA=ON: sm_80 and sm_90, never native)
#      in build-gpu/ and builds only what it runs (test_cuda, scd-gpu-bench),
#   3. runs every [cuda] Catch2 test (kernel-vs-CPU-twin parity, golden stories260K, CPU-vs-
#      CUDA backend parity) and fails if any of them skipped although a device is present,
#   4. runs scd-gpu-bench (cuBLAS GEMM peak, copy bandwidth, prefill TFLOP/s at 1K/4K/16K,
#      decode tok/s at batch 1/32, SCD rebuild vs prefill at 4K, SEKV vs full-KV decode step at
#      32K/128K, on Mistral-7B and Llama-3-8B shapes, random device weights),
# and writes every log plus results.json / results.md / summary.txt into OUTDIR.
# Environment: JOBS (default 16), SCD_GPU_BUILD_DIR (default <repo>/build-gpu),
# BENCH_ARGS (extra scd-gpu-bench flags, e.g. "--prefill 1024,4096").
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

step "device: nvidia-smi > $OUT/nvidia-smi.txt"
if nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1; then
  note "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null)"
else
  note "nvidia-smi failed (see nvidia-smi.txt); continuing, the tests will say whether CUDA works"
fi

step "configure: cmake -S $ROOT -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DSCD_CUDA=ON"
if ! cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSCD_CUDA=ON \
    > "$OUT/configure.log" 2>&1; then
  tail -20 "$OUT/configure.log"
  note "FAILED: configure (see configure.log)"
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

step "test: $BUILD/tests/test_cuda '[cuda]' --durations yes (log: test_cuda.log)"
timeout 180 "$BUILD/tests/test_cuda" '[cuda]' --durations yes > "$OUT/test_cuda.log" 2>&1
TEST_RC=$?
tail -4 "$OUT/test_cuda.log" | tee -a "$SUMMARY"
SKIPPED=$(grep -c "no CUDA device: skipping" "$OUT/test_cuda.log" || true)
if [[ $TEST_RC -eq 0 && $SKIPPED -gt 0 ]]; then
  note "FAILED: $SKIPPED [cuda] tests skipped: no usable CUDA device"
  TEST_RC=3
fi
note "test_cuda exit code $TEST_RC"

step "bench: $BUILD/bin/scd-gpu-bench --out $OUT ${BENCH_ARGS:-} (log: bench.log)"
# shellcheck disable=SC2086
timeout 200 "$BUILD/bin/scd-gpu-bench" --out "$OUT" ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
BENCH_RC=$?
grep -E "vs_gemm_peak=|vs_copy=|scd_rebuild_speedup=|sekv_vs_full=" "$OUT/bench.log" \
  | tee -a "$SUMMARY"
note "scd-gpu-bench exit code $BENCH_RC (results: results.json, results.md)"

step "done in $((SECONDS - START))s: logs and results in $OUT"
if [[ $TEST_RC -ne 0 || $BENCH_RC -ne 0 ]]; then
  note "FAILED (test $TEST_RC, bench $BENCH_RC)"
  exit 1
fi
note "OK"
