#!/usr/bin/env bash
# One context, two specialists: the bundled base model and both bundled specialists served
# two ways, side by side on the same workload (scripts/fanout_bench.py):
#   shared    both on one shared basis (configs/calibration/stories260K.shared.scd.safetensors,
#             as configs/prefill.yaml serves them): one payload and one cache entry for both;
#   per-pair  each on its own pair's artifact at the same ranks and options (calibrated into
#             WORK on the first run: scd-calibrate with the shared file's defaults).
# For each: a fresh prefill daemon and a decode daemon per specialist, then
#   1. CONTEXTS fan-out requests (scd.fanout: both specialists), one per context: the base
#      model's prefills and the encodes per context, their time, and the payload bytes sent;
#   2. CONTEXTS further contexts, four questions each, alternating the specialists as separate
#      requests: the prefix cache's hit rate and the client's TTFT p50 / p90.
# A Markdown table is printed and written to OUT/table.md, the figures to OUT/*.json.
# Environment: BUILD_DIR (build), OUT (docs/results/fanout_bench), WORK (/tmp/scd-fanout-bench:
# the per-pair artifacts), CONTEXTS (25), STORIES (2 bAbI qa1 dev stories a context, distinct in
# every context: 2 x CONTEXTS x STORIES of its 100),
# HTTP_PORT (18600), GRPC_PORT (17600), DECODE_PORT_BASE (17701: gRPC, +100 data plane, +200
# HTTP; the WikiText daemon's are one more each).
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
OUT="${OUT:-docs/results/fanout_bench}"
WORK="${WORK:-/tmp/scd-fanout-bench}"
CONTEXTS="${CONTEXTS:-25}"
STORIES="${STORIES:-2}"
HTTP_PORT="${HTTP_PORT:-18600}"
GRPC_PORT="${GRPC_PORT:-17600}"
DECODE_PORT_BASE="${DECODE_PORT_BASE:-17701}"
S="$(cd .. && pwd)/shared"
M="${S}/models"
B="${S}/data/babi"
SHARED="$(pwd)/configs/calibration/stories260K.shared.scd.safetensors"
LOG_DIR="$(mktemp -d)"
export OPENBLAS_NUM_THREADS=1
mkdir -p "${OUT}" "${WORK}"
for f in "${M}/stories260K" "${M}/stories260K-babi-qa" "${M}/stories260K-wiki" "${SHARED}"; do
  [[ -e "${f}" ]] || { printf 'missing %s (fixtures in ../shared, or scd-calibrate)\n' "${f}" >&2; exit 1; }
done

# The per-pair artifacts: each pair calibrated alone, with the shared file's options.
CORPUS="${S}/data/tinystories_calib.txt,${B}/qa1_single-supporting-fact_train.txt,${B}/qa2_two-supporting-facts_train.txt"
for c in babi-qa wiki; do
  if [[ ! -f "${WORK}/pair_${c}.safetensors" ]]; then
    printf '==> calibrating stories260K -> stories260K-%s alone\n' "${c}" >&2
    "${BUILD_DIR}/bin/scd-calibrate" --producer "${M}/stories260K" --consumer "${M}/stories260K-${c}" \
      --corpus "${CORPUS}" --out "${WORK}/pair_${c}.safetensors" >"${LOG_DIR}/calibrate_${c}.log" 2>&1
  fi
done

pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill -TERM "${pid}" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "${pid}" 2>/dev/null || true; done
  pids=()
}
trap stop_all EXIT

# start TAG BABI_ARTIFACT WIKI_ARTIFACT: the prefill daemon and both decode daemons, until
# each specialist has a live decode daemon.
start() {
  local tag="$1" babi="$2" wiki="$3"
  "${BUILD_DIR}/bin/scd-prefill" --config configs/prefill.yaml --http.port="${HTTP_PORT}" \
    --grpc.listen="127.0.0.1:${GRPC_PORT}" --control_plane.dev_insecure=true \
    --specialists="[{name: stories260K-babi-qa, artifact: '${babi}', mode: scd}, {name: stories260K-wiki, artifact: '${wiki}', mode: scd}]" \
    2>"${LOG_DIR}/prefill_${tag}.log" &
  pids+=($!)
  local i=0 c
  for c in babi-qa wiki; do
    local art="${babi}"
    [[ "${c}" == wiki ]] && art="${wiki}"
    "${BUILD_DIR}/bin/scd-decode" --config "configs/decode-${c}.yaml" --model.artifact="${art}" \
      --control_plane.address="127.0.0.1:${GRPC_PORT}" --control_plane.dev_insecure=true \
      --grpc.listen="127.0.0.1:$((DECODE_PORT_BASE + i))" \
      --data_plane.listen="127.0.0.1:$((DECODE_PORT_BASE + 100 + i))" \
      --http.port="$((DECODE_PORT_BASE + 200 + i))" 2>"${LOG_DIR}/decode_${c}_${tag}.log" &
    pids+=($!)
    i=$((i + 1))
  done
  for _ in $(seq 1 150); do
    local m
    m="$(curl -sf "http://127.0.0.1:${HTTP_PORT}/metrics" || true)"
    if grep -q '^scd_decode_instances{model="stories260K-babi-qa"} 1' <<<"${m}" &&
      grep -q '^scd_decode_instances{model="stories260K-wiki"} 1' <<<"${m}"; then
      return 0
    fi
    for pid in "${pids[@]}"; do
      kill -0 "${pid}" 2>/dev/null || { cat "${LOG_DIR}"/*_"${tag}".log >&2; exit 1; }
    done
    sleep 0.2
  done
  printf 'the daemons did not come up; logs in %s\n' "${LOG_DIR}" >&2
  exit 1
}

printf '==> daemon logs: %s\n' "${LOG_DIR}" >&2
for tag in shared per-pair; do
  if [[ "${tag}" == shared ]]; then start shared "${SHARED}" "${SHARED}"
  else start per-pair "${WORK}/pair_babi-qa.safetensors" "${WORK}/pair_wiki.safetensors"; fi
  for w in fanout alternate; do
    printf '==> %s: %s workload, %s contexts\n' "${tag}" "${w}" "${CONTEXTS}" >&2
    python3 scripts/fanout_bench.py --port "${HTTP_PORT}" --workload "${w}" \
      --prompts "${B}/qa1_single-supporting-fact_dev.txt" --contexts "${CONTEXTS}" --stories "${STORIES}" \
      --out "${OUT}/${tag}_${w}.json"
  done
  stop_all
done

python3 - "${OUT}" <<'EOF' | tee "${OUT}/table.md"
import json, sys
out = sys.argv[1]
r = {t: {w: json.load(open(f"{out}/{t}_{w}.json")) for w in ("fanout", "alternate")}
     for t in ("shared", "per-pair")}
print("One context to both specialists (fan-out), per context:")
print()
print("| artifacts | base-model prefills | their ms | encodes | their ms | payloads sent | bytes sent |")
print("|---|---|---|---|---|---|---|")
for t in ("shared", "per-pair"):
    f = r[t]["fanout"]
    print(f"| {t} | {f['prefills_per_context']:.2f} | {f['prefill_ms_per_context']:.2f} "
          f"| {f['encodes_per_context']:.2f} | {f['encode_ms_per_context']:.2f} "
          f"| {f['payloads_per_context']:.2f} | {f['payload_bytes_per_context'] / 1e3:.1f} KB |")
print()
print("Separate requests alternating the specialists, four questions a context:")
print()
print("| artifacts | requests | cache hit rate | encodes | TTFT p50 / p90 (client) |")
print("|---|---|---|---|---|")
for t in ("shared", "per-pair"):
    a = r[t]["alternate"]
    print(f"| {t} | {a['requests']} | {a['hit_rate']:.2f} ({a['cache_hits']:.0f} / "
          f"{a['cache_hits'] + a['cache_misses']:.0f}) | {a['encodes']:.0f} "
          f"| {a['ttft_ms_p50']:.1f} / {a['ttft_ms_p90']:.1f} ms |")
EOF
