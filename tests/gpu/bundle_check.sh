#!/usr/bin/env bash
# bundle_check.sh BUILD OUTDIR: packs a GPU bundle from the CUDA build BUILD with
# scripts/gpu_bundle.sh (into OUTDIR, not the source tree) and runs scripts/gpu_check.sh on it,
# as the device run would, then checks the steps a machine without a GPU can check: the bundle
# unpacks, its sources match this tree, the binaries load with the bundle's libraries, test_cuda
# runs (each [cuda] case skips with its message when there is no device) and scd-gpu-bench
# starts. gpu_check.sh itself exits 1 here (skipped tests are a failure of a GPU check).
set -euo pipefail
build=$1
out=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rm -rf "$out"
mkdir -p "$out"
SCD_GPU_BUNDLE_DIR=$out/bundle JOBS=${JOBS:-2} "$root/scripts/gpu_bundle.sh" "$build" \
  > "$out/bundle.log" 2>&1 || { cat "$out/bundle.log"; exit 1; }
set +e
SCD_GPU_BUNDLE=$out/bundle/scd-gpu-bundle.tar.gz SCD_GPU_BUILD_DIR=$out/check-build \
  "$root/scripts/gpu_check.sh" "$out/check" > "$out/check.log" 2>&1
set -e
fail() {
  cat "$out/check.log"
  echo "bundle_check: $*" >&2
  exit 1
}
summary=$out/check/summary.txt
grep -q "bundle sources match this tree" "$summary" || fail "sources do not match"
grep -q "cuBLAS 13 from:" "$summary" || fail "no cuBLAS step"
if grep -q "do not load" "$summary"; then fail "the binaries do not load"; fi
grep -q "test cases" "$out/check/test_cuda.log" || fail "test_cuda did not run"
# First contact ran each of its cases in its own process; without a device each skips.
cases=$(grep -c "^== " "$out/check/first_contact.log" || true)
[[ $cases -ge 5 ]] || fail "first contact ran $cases cases"
[[ $(grep -c "^   \(ok\|skipped\): " "$summary") -eq $cases ]] || fail "a first-contact case failed"
[[ $(grep -c "test cases" "$out/check/first_contact.log") -eq $cases ]] ||
  fail "a first-contact case matched no test (a renamed case?)"
grep -q "^command: .*scd-gpu-bench" "$out/check/bench.log" || fail "scd-gpu-bench did not start"
# compute-sanitizer's filter (gpu_check.sh's SAN_TESTS) names test files by their Catch2 file
# tags: each must hold cases, or a renamed or split file would leave the device's memcheck and
# racecheck with less to run, silently. (Catch2 exits with the count it listed.)
san=$(sed -n 's/^SAN_TESTS="\(.*\)"$/\1/p' "$root/scripts/gpu_check.sh")
[[ -n $san ]] || fail "no SAN_TESTS line in gpu_check.sh"
IFS=, read -ra san_tags <<<"$san"
for tag in "${san_tags[@]}"; do
  listed=$("$build/tests/test_cuda" -# "$tag" --list-test-names-only || true)
  [[ $(grep -c "^CUDA " <<<"$listed" || true) -ge 1 ]] ||
    fail "compute-sanitizer's filter $tag matches no test case"
done
# Without a device, the summary says why there is none, in the benchmark's words.
if grep -q "skipped: no usable CUDA device" "$summary"; then
  grep -q "^   scd-gpu-bench: no usable CUDA device: " "$summary" || fail "no reason for the skips"
fi
# A device where the mma.sync kernel and the zoom-in fail first contact, played by a stand-in
# test binary: the summary names them, the full run leaves them (and the backend case that runs
# every kernel choice) out, the benchmark is told to skip what it can, and the check fails.
fake=$out/fake_test_cuda.sh
cat > "$fake" <<'SH'
#!/usr/bin/env bash
echo "fake test_cuda: $*"
case "$1" in
  "CUDA tensor-core prefill attention"* | "CUDA SekvZoom"*) exit 1 ;;
esac
echo "test cases: 1 | 1 passed"
SH
chmod +x "$fake"
set +e
SCD_GPU_TEST_BIN=$fake SCD_GPU_BUNDLE=$out/bundle/scd-gpu-bundle.tar.gz \
  SCD_GPU_BUILD_DIR=$out/check-build "$root/scripts/gpu_check.sh" "$out/failing" \
  > "$out/failing.log" 2>&1
rc=$?
set -e
failing=$out/failing/summary.txt
[[ $rc -ne 0 ]] || fail "a failed first contact did not fail the check"
[[ $(grep -c "FAILED (exit 1): mma.sync prefill attention" "$failing") -eq 1 ]] ||
  fail "the mma.sync kernel's failure is not in the summary"
[[ $(grep -c "FAILED (exit 1): SEKV zoom-in" "$failing") -eq 2 ]] ||
  fail "the zoom-in's two failures are not in the summary"
[[ $(grep -c "^   ok: " "$failing") -eq $((cases - 3)) ]] || fail "the passing cases are not ok"
full=$(grep "^fake test_cuda: \[cuda\]" "$out/failing/test_cuda.log")
for left_out in '~"CUDA tensor-core prefill attention matches cpu::CausalAttention"' \
  "~\"CUDA backend gives the CPU backend's logits with every kernel choice\"" \
  '~"CUDA SekvZoom matches SelectSpans*"' '~"CUDA SekvZoom with bases past its shared staging'; do
  [[ $full == *"$left_out"* ]] || fail "the full run does not leave out $left_out: $full"
done
grep -q "^command: .*scd-gpu-bench.* --skip-mma --skip-sekv-model --skip-sekv-batch$" \
  "$out/failing/bench.log" || fail "the benchmark was not told to skip the failed kernels"
echo "bundle_check: the bundle unpacks, matches, loads and runs"
