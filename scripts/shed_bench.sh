#!/usr/bin/env bash
# Load shedding, side by side: the bundled pair (configs/prefill.yaml + one decode daemon of
# configs/decode-babi-qa.yaml, OPENBLAS_NUM_THREADS=1) under Poisson arrivals at twice its
# saturation rate, once with shedding on (limits.max_queue_wait at its default, 5 s) and once
# off (limits.max_queue_wait=0), with the same seed, workload and rate.
#   1. Saturation: closed-loop scd-loadgen at concurrency 8, 16, 32, 64 (RAMP_SECONDS each) on
#      a pair with shedding off; the best ok requests/s is the saturation rate (RATE=<r>
#      skips the ramp and offers r directly).
#   2. For off, then on: a fresh pair, 20 warm-up requests, then Poisson arrivals at
#      2 x saturation for DURATION seconds, every request's outcome awaited.
#   3. A markdown table (printed, and written to OUT/table.md): goodput (ok with TTFT <= 5 s,
#      per second of the run), the share refused with 429, the other failures, the accepted
#      requests' TTFT, and how it compares with admission's prediction (request_done's
#      predicted_ttft_ms in the prefill daemon's log, predictions of 1 s and more).
# Workload: synthetic PROMPT_WORDS-word prompts (one per request), MAX_TOKENS greedy tokens.
# With 16-word prompts the decode daemon is the bottleneck, and max_queue_wait is what sheds;
# with long ones (100 words) the base model's prefill is, and limits.prefill_queue (64) sheds
# first, on and off alike.
# Environment: BUILD_DIR (build), OUT (docs/results/shed_bench: scd-loadgen's JSON reports and
# the table; the daemons' logs go to a temporary directory), DURATION (60), RAMP_SECONDS (10),
# RATE, PROMPT_WORDS (16), MAX_TOKENS (64), HTTP_PORT (18400), GRPC_PORT (17400),
# DECODE_PORT_BASE (17501: gRPC, +100 data plane, +200 HTTP).
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
OUT="${OUT:-docs/results/shed_bench}"
DURATION="${DURATION:-60}"
RAMP_SECONDS="${RAMP_SECONDS:-10}"
PROMPT_WORDS="${PROMPT_WORDS:-16}"
MAX_TOKENS="${MAX_TOKENS:-64}"
HTTP_PORT="${HTTP_PORT:-18400}"
GRPC_PORT="${GRPC_PORT:-17400}"
DECODE_PORT_BASE="${DECODE_PORT_BASE:-17501}"
MODEL=stories260K-babi-qa
SLO_MS=5000
LOG_DIR="$(mktemp -d)"
# The pair's own cluster secret, fresh for the run.
TOKEN="$(python3 -c 'import secrets; print(secrets.token_hex(32))')"
export OPENBLAS_NUM_THREADS=1
mkdir -p "${OUT}"

pids=()
stop_pair() {
  for pid in "${pids[@]}"; do kill -TERM "${pid}" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "${pid}" 2>/dev/null || true; done
  pids=()
}
trap stop_pair EXIT

# start_pair TAG MAX_QUEUE_WAIT: one prefill and one decode daemon, waited for until /ready.
start_pair() {
  printf '==> starting the pair (%s, limits.max_queue_wait=%s)\n' "$1" "$2" >&2
  "${BUILD_DIR}/bin/scd-prefill" --config configs/prefill.yaml --http.port="${HTTP_PORT}" \
    --grpc.listen="127.0.0.1:${GRPC_PORT}" --control_plane.cluster_token="${TOKEN}" \
    --limits.max_queue_wait="$2" \
    2>"${LOG_DIR}/prefill_$1.log" &
  pids+=($!)
  "${BUILD_DIR}/bin/scd-decode" --config configs/decode-babi-qa.yaml \
    --control_plane.address="127.0.0.1:${GRPC_PORT}" --control_plane.cluster_token="${TOKEN}" \
    --grpc.listen="127.0.0.1:${DECODE_PORT_BASE}" \
    --data_plane.listen="127.0.0.1:$((DECODE_PORT_BASE + 100))" \
    --http.port="$((DECODE_PORT_BASE + 200))" 2>"${LOG_DIR}/decode_$1.log" &
  pids+=($!)
  for _ in $(seq 1 150); do
    if curl -sf "http://127.0.0.1:${HTTP_PORT}/ready" >/dev/null; then return 0; fi
    for pid in "${pids[@]}"; do
      if ! kill -0 "${pid}" 2>/dev/null; then
        printf 'shed_bench: a daemon exited; logs in %s\n' "${LOG_DIR}" >&2
        exit 1
      fi
    done
    sleep 0.2
  done
  printf 'shed_bench: the pair did not become ready; logs in %s\n' "${LOG_DIR}" >&2
  exit 1
}

# loadgen JSON ARGS...: scd-loadgen with the workload above, its report to JSON.
loadgen() {
  local json="$1"
  shift
  "${BUILD_DIR}/bin/scd-loadgen" --url "http://127.0.0.1:${HTTP_PORT}" --model "${MODEL}" \
    --synthetic-prompt-tokens "${PROMPT_WORDS}" --max-tokens "${MAX_TOKENS}" \
    --extra-body '{"temperature": 0}' \
    --slo-ttft-ms "${SLO_MS}" --seed 7 --png none --quiet --json "${json}" "$@"
}

printf '==> daemon logs: %s\n' "${LOG_DIR}" >&2
start_pair off 0s
if [[ -z "${RATE:-}" ]]; then
  best=0
  for c in 8 16 32 64; do
    printf '==> saturation ramp: closed loop, concurrency %s, %s s\n' "${c}" "${RAMP_SECONDS}" >&2
    loadgen "${OUT}/ramp_c${c}.json" --concurrency "${c}" --duration "${RAMP_SECONDS}" >&2
    best=$(python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))["throughput"]["requests_per_s"]
print(max(r, float(sys.argv[2])))' "${OUT}/ramp_c${c}.json" "${best}")
  done
  RATE=$(python3 -c "print(round(2 * ${best}, 1))")
  printf '==> saturation %.1f req/s (best closed-loop level); offering %s req/s\n' \
    "${best}" "${RATE}" >&2
fi

for mode in off on; do
  if [[ "${mode}" == on ]]; then
    stop_pair
    start_pair on 5s
  fi
  printf '==> shedding %s: Poisson %s req/s for %s s\n' "${mode}" "${RATE}" "${DURATION}" >&2
  loadgen "${OUT}/${mode}.json" --rate "${RATE}" --duration "${DURATION}" --warmup 20 >&2
done
stop_pair

python3 - "${OUT}" "${RATE}" "${SLO_MS}" "${LOG_DIR}" <<'EOF' | tee "${OUT}/table.md"
import json, sys
out, rate, slo_ms, logs = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]

def prediction_error(mode):
    """Real / predicted TTFT of the requests served with a prediction of at least 1 s."""
    ratios = []
    for line in open(f"{logs}/prefill_{mode}.log"):
        e = json.loads(line)
        if e.get("event") == "request_done" and e.get("predicted_ttft_ms", 0) >= 1000:
            ratios.append(e["ttft_ms"] / e["predicted_ttft_ms"])
    if not ratios:
        return "-"
    ratios.sort()
    at = lambda q: ratios[min(len(ratios) - 1, int(q * len(ratios)))]
    return f"{at(0.01):.2f}-{at(0.99):.2f} ({ratios[-1]:.2f})"

print(f"Poisson {rate:g} req/s offered; goodput: ok with TTFT <= {slo_ms / 1e3:g} s, per second")
print()
print("| shedding | issued | goodput req/s | shed (429) | other failures "
      "| accepted TTFT p50 / p99 | 429 answered p99 | TTFT / predicted, p1-p99 (max) |")
print("|---|---|---|---|---|---|---|---|")
for mode, label in (("on", "on (max_queue_wait 5 s)"), ("off", "off")):
    r = json.load(open(f"{out}/{mode}.json"))
    req, shed = r["requests"], r["shed"]
    other = req["issued"] - req["ok"] - shed["requests"]
    ttft = r["ttft_ms"]
    answered = shed["answer_ms"]["p99"]
    print(f"| {label} | {req['issued']} | {r['goodput']['requests_per_s']:.1f} "
          f"| {shed['requests']} ({100 * shed['fraction']:.0f}%) | {other} "
          f"| {ttft['p50'] / 1e3:.2f} / {ttft['p99'] / 1e3:.2f} s "
          f"| {'-' if answered is None else f'{answered:.0f} ms'} | {prediction_error(mode)} |")
EOF
