#!/usr/bin/env bash
# bench_smoke.sh BENCH OUTDIR: runs scd-gpu-bench (built over the CPU stand-ins, or over the
# GPU emulator's kernels) at --quick's toy sizes and checks that it finished every part: exit
# 0, results.json with the GEMM and copy ceilings and, for the tiny model, prefill, decode, the
# SCD rebuild, the SEKV step and the whole-model SEKV step with no error, results.md with every
# table, and the summary lines gpu_check.sh greps.
set -euo pipefail
bench=$1
out=$2
rm -rf "$out"
mkdir -p "$out"
"$bench" --quick --out "$out" > "$out/bench.log" 2>&1 || {
  tail -30 "$out/bench.log"
  echo "bench_smoke: scd-gpu-bench --quick failed" >&2
  exit 1
}
python3 - "$out/results.json" "$(basename "$bench")" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
# Over the emulator the kernels are the real ones; over the stand-ins every kernel is its CPU
# twin, so two kernels' results are identical there.
real_kernels = sys.argv[2].endswith("-emu")
assert r["gemm"]["peak_tflops"] > 0 and r["copy"]["gbps"] > 0, "ceilings"
# Decode-sized projections at m = 1, 4, 8 (toy weights), and prefill attention alone.
assert [x["m"] for x in r["small_batch"]] == [1, 4, 8], r["small_batch"]
for x in r["small_batch"]:
    assert x["us"] > 0 and x["cublas_us"] > 0 and x["speedup"] > 0, x
(a,) = r["prefill_attention"]
assert a["tokens"] == 128 and a["wmma_ms"] > 0 and a["mma_ms"] > 0 and a["mma_speedup"] > 0, a
# Decode attention alone, both split kernels.
assert [(x["batch"], x["context"]) for x in r["decode_attention"]] == [(1, 256), (2, 130)], r
for x in r["decode_attention"]:
    assert x["us"] > 0 and x["generic_us"] > 0 and x["speedup"] > 0 and x["vs_copy"] > 0, x
# The SEKV zoom-in alone, bases on the device and pinned (--quick: 1024 positions).
z = r["sekv_zoom"]
assert z["context"] == 1024 and z["spans_per_kv_head"] == 108, z
assert z["device_us"] > 0 and z["pinned_us"] > 0 and z["pinned_vs_device"] > 0, z
(m,) = r["models"]
assert m["model"] == "tiny", m["model"]
assert [p["tokens"] for p in m["prefill"]] == [64, 128], m["prefill"]
for p in m["prefill"]:  # again with the mma.sync attention, its logits against kAuto's
    x = p["mma"]
    assert "error" not in x and x["ttft_ms"] > 0 and x["speedup"] > 0, p
    assert 0 <= x["logits"]["relative_diff"] < 0.05 and x["logits"]["same_greedy_token"], p
    # the mma.sync kernel rounds differently from WMMA: the choice reached the kernels
    assert (x["logits"]["relative_diff"] > 0) == real_kernels, p
assert [d["batch"] for d in m["decode"]] == [1, 2], m["decode"]
for d in m["decode"]:  # graphed: one graph recorded in the warm-up, every timed step replayed
    g, e = d["modes"]["graphs"], d["modes"]["eager"]
    assert g["graph_captures"] == 1 and g["graph_replays"] >= 1 and g["graph_nodes"] > 0, d
    assert e["graph_captures"] == 0 and e["graph_replays"] == 0, d
    # the stand-ins' graph holds 1024 bytes of device memory per node (standin_memory.h)
    assert g["graph_device_bytes"] == g["graph_nodes"] * 1024 == d["graph_device_bytes"], d
    assert e["graph_device_bytes"] == 0, d
    assert d["graph_speedup"] > 0 and d["eager_step_ms"] > 0, d
    # batches up to 8 again with cuBLAS projections instead of the weight stream
    c = d["modes"]["graphs_cublas"]
    assert c["step_ms"] == d["cublas_step_ms"] > 0 and d["small_batch_speedup"] > 0, d
# Where the time goes: the longest prefill (no 4K here) and batch-1 decode, every operation of
# the tiny model's 8 layers in its class, the shares adding up to the pass.
o = m["op_profile"]
assert "error" not in o, o
assert o["prefill"]["tokens"] == 128 and o["decode"]["steps"] == 2, o
layers = 8
want_ops = {"embed": 1, "norm": 2 * layers, "qkv": layers, "rope_kv": 2 * layers,
            "attention": layers, "elementwise": 2 * layers, "o_proj": layers,
            "gate_up": layers, "down": layers, "logits": 2,
            "sekv_gate": 0, "sekv_zoom": 0, "sekv_resident": 0}  # the last three: GpuSekv's
rated = {"qkv", "attention", "o_proj", "gate_up", "down", "logits"}
for part, rate in (("prefill", "vs_gemm_peak"), ("decode", "vs_copy")):
    x = o[part]
    assert x["pass_ms"] > 0 and x["profiled_ms"] > 0, x
    assert x["unprofiled_ms" if part == "prefill" else "unprofiled_eager_ms"] > 0, x
    assert [k["class"] for k in x["classes"]] == list(want_ops), x
    for k in x["classes"]:
        assert k["ops"] == want_ops[k["class"]] and k["ms"] >= 0, (part, k)
        assert (rate in k) == (k["class"] in rated and k["ms"] > 0), (part, k)
    assert abs(sum(k["share"] for k in x["classes"]) - 1) < 1e-3, x
assert "error" not in m["scd_rebuild"], m["scd_rebuild"]
assert m["scd_rebuild"]["speedup"] > 0, m["scd_rebuild"]
(s,) = m["sekv"]
assert "error" not in s and s["context"] == 1024 and s["ratio"] > 0, s
assert s["whole_step"]["derived"] and s["whole_step"]["ratio"] > 0, s
(w,) = m["sekv_model"]
assert "error" not in w and w["context"] == 1024 and w["ratio"] > 0, w
assert w["expanded_rows_per_head"] > 0 and 0 < w["tier_fraction"] < 1, w
h = w["host_zoom"]  # the same steps with the zoom-in on the host: the same rows expanded
assert h["ms"] > 0 and w["device_zoom_speedup"] > 0, w
assert h["expanded_rows_per_head"] == w["expanded_rows_per_head"], w
# The stand-in device takes registrations: the device zoom reads the CPU tier where it lies.
assert w["cpu_tier_access"] == "registered" and h["cpu_tier_access"] == "none", w
assert w["setup_s"]["register"] >= 0 and w["setup_s"]["gpu_tier"] > 0, w
assert w["setup_s"]["gpu_tier_with_copy"] > 0 and h["setup_s"]["gpu_tier_with_copy"] == 0, w
# 3 profiled steps of each path: attention and the rest of each step's device time.
for prof in (w["full_profile"], w["profile"], h["profile"]):
    assert prof["steps"] == 3 and prof["attention_ms"] > 0 and prof["other_ms"] > 0, w
    assert abs(prof["attention_ms"] + prof["other_ms"] - prof["pass_ms"]) < 1e-6, prof
# SEKV's attention in its parts (GpuSekv marks them); full KV has none.
for prof in (w["profile"], h["profile"]):
    assert prof["sekv_gate_ms"] > 0 and prof["sekv_zoom_ms"] > 0, prof
    assert prof["sekv_resident_ms"] > 0, prof
    parts = prof["sekv_gate_ms"] + prof["sekv_zoom_ms"] + prof["sekv_resident_ms"]
    assert parts < prof["attention_ms"], prof
f = w["full_profile"]
assert f["sekv_gate_ms"] == f["sekv_zoom_ms"] == f["sekv_resident_ms"] == 0, f
assert w["attention_ratio"] > 0, w
# Concurrent SEKV requests (the last model): batched, then beside plain ones in mixed steps.
b = m["sekv_batch"]
assert [x["batch"] for x in b] == [1, 2], b
for x in b:
    assert x["speedup"] > 0 and x["two_steps_ms"] > 0 and x["mixed_ms"] > 0, x
    assert x["mixed_speedup"] > 0, x
PY
for table in "not figures" "Decode-sized projections" "Prefill attention alone" \
  "Decode attention alone" "SEKV zoom-in alone" "SCD rebuild" "SEKV decode step" "SEKV whole decode step" \
  "Concurrent SEKV requests" "Where the device time goes" \
  "The same steps, where the device time goes"; do
  grep -q "$table" "$out/results.md" || { echo "bench_smoke: no '$table' table" >&2; exit 1; }
done
# (--quick has no 4K prefill, so no prefill_4k_vs_gemm_peak line.)
for key in decode_b1_vs_copy= scd_rebuild_speedup= sekv_vs_full= sekv_whole_step_vs_full= \
  sekv_model_vs_full= batched_vs_one_by_one= mixed_vs_two_steps= small_batch_vs_cublas= \
  mma_vs_wmma= vectorized_vs_generic= zoom_pinned_vs_device= zoom_bus_vs_copy= \
  prefill_mma_vs_wmma= prefill_128_time_by_op= decode_b1_time_by_op= \
  sekv_model_attention_vs_full=; do
  grep -q "$key" "$out/bench.log" || { echo "bench_smoke: no '$key' line" >&2; exit 1; }
done
# --skip-mma (gpu_check.sh's first contact passes it when the mma.sync kernel failed its
# parity case): no mma.sync call at all, and the prefills say so. Over the stand-ins only, with
# the later parts skipped: a few seconds.
if [[ $(basename "$bench") != *-emu ]]; then
  "$bench" --quick --out "$out/skip_mma" --skip-mma --skip-scd --skip-sekv --skip-sekv-model \
    --skip-sekv-batch > "$out/skip_mma.log" 2>&1 || {
    tail -20 "$out/skip_mma.log"
    echo "bench_smoke: scd-gpu-bench --quick --skip-mma failed" >&2
    exit 1
  }
  python3 - "$out/skip_mma/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert "prefill_attention" not in r, "mma.sync timed alone despite --skip-mma"
(m,) = r["models"]
for p in m["prefill"]:
    assert p["mma"] == {"error": "skipped (--skip-mma)"} and p["ttft_ms"] > 0, p
PY
  if grep -q " mma_vs_wmma=" "$out/skip_mma.log"; then
    echo "bench_smoke: --skip-mma still timed the mma.sync kernel" >&2
    exit 1
  fi
fi
echo "bench_smoke: scd-gpu-bench --quick finished every part"
