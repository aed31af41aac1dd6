#!/usr/bin/env bash
# Demo of disaggregated serving on loopback: starts one prefill daemon (base model
# stories260K, configs/prefill.yaml) and two decode daemons (the bAbI-QA specialist,
# configs/decode-babi-qa.yaml, and the WikiText one, configs/decode-wiki.yaml, both on one
# shared SCD basis), waits until both are registered, sends one streaming chat request to the
# bAbI-QA specialist with curl, prints the raw SSE stream and the assembled answer, then asks
# both specialists the same question in one fan-out request (one prefill, one payload) and
# prints each one's answer, then stops the daemons with SIGTERM.
# Environment: BUILD_DIR (default build), HTTP_PORT (8000), GRPC_PORT (7000) and
# DECODE_PORT_BASE (7101: gRPC, +100 data plane, +200 HTTP; the WikiText daemon's are one
# more each) to move off busy ports.
# The configs' cluster token is an example, not a secret, so both daemons run with
# --control_plane.dev_insecure=true (a development cluster on loopback; docs/CONFIG.md,
# "Securing a cluster").
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
HTTP_PORT="${HTTP_PORT:-8000}"
GRPC_PORT="${GRPC_PORT:-7000}"
DECODE_PORT_BASE="${DECODE_PORT_BASE:-7101}"
LOG_DIR="$(mktemp -d)"

run() { printf '+' >&2; printf ' %q' "$@" >&2; printf '\n' >&2; "$@"; }

for bin in scd-prefill scd-decode; do
  if [[ ! -x "${BUILD_DIR}/bin/${bin}" ]]; then
    printf '==> %s/bin/%s is missing; building it\n' "${BUILD_DIR}" "${bin}" >&2
    [[ -f "${BUILD_DIR}/CMakeCache.txt" ]] ||
      run cmake -S . -B "${BUILD_DIR}" -G Ninja -DCMAKE_BUILD_TYPE=Release
    run cmake --build "${BUILD_DIR}" --target "${bin}"
  fi
done

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "${pid}" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "${pid}" 2>/dev/null || true; done
}
trap cleanup EXIT

printf '==> starting the prefill daemon (logs: %s/prefill.log)\n' "${LOG_DIR}" >&2
"${BUILD_DIR}/bin/scd-prefill" --config configs/prefill.yaml --http.port="${HTTP_PORT}" \
  --grpc.listen="127.0.0.1:${GRPC_PORT}" --control_plane.dev_insecure=true \
  2>"${LOG_DIR}/prefill.log" &
pids+=($!)
printf '==> starting the decode daemon (logs: %s/decode.log)\n' "${LOG_DIR}" >&2
"${BUILD_DIR}/bin/scd-decode" --config configs/decode-babi-qa.yaml \
  --control_plane.address="127.0.0.1:${GRPC_PORT}" --control_plane.dev_insecure=true \
  --grpc.listen="127.0.0.1:${DECODE_PORT_BASE}" \
  --data_plane.listen="127.0.0.1:$((DECODE_PORT_BASE + 100))" \
  --http.port="$((DECODE_PORT_BASE + 200))" 2>"${LOG_DIR}/decode.log" &
pids+=($!)
printf '==> starting the WikiText decode daemon (logs: %s/decode-wiki.log)\n' "${LOG_DIR}" >&2
"${BUILD_DIR}/bin/scd-decode" --config configs/decode-wiki.yaml \
  --control_plane.address="127.0.0.1:${GRPC_PORT}" --control_plane.dev_insecure=true \
  --grpc.listen="127.0.0.1:$((DECODE_PORT_BASE + 1))" \
  --data_plane.listen="127.0.0.1:$((DECODE_PORT_BASE + 101))" \
  --http.port="$((DECODE_PORT_BASE + 201))" 2>"${LOG_DIR}/decode-wiki.log" &
pids+=($!)

# Ready, with a live decode daemon of each specialist (the gauge is refreshed every second).
both_registered() {
  local metrics
  curl -sf "http://127.0.0.1:${HTTP_PORT}/ready" >/dev/null || return 1
  metrics="$(curl -sf "http://127.0.0.1:${HTTP_PORT}/metrics")" || return 1
  grep -q '^scd_decode_instances{model="stories260K-babi-qa"} 1' <<<"${metrics}" &&
    grep -q '^scd_decode_instances{model="stories260K-wiki"} 1' <<<"${metrics}"
}
printf '==> waiting for both decode daemons to register at http://127.0.0.1:%s\n' "${HTTP_PORT}" >&2
for _ in $(seq 1 100); do
  if both_registered; then break; fi
  for pid in "${pids[@]}"; do
    if ! kill -0 "${pid}" 2>/dev/null; then
      printf 'a daemon exited; its log:\n' >&2
      cat "${LOG_DIR}"/*.log >&2
      exit 1
    fi
  done
  sleep 0.2
done
curl -sf "http://127.0.0.1:${HTTP_PORT}/ready" >&2 && printf '\n' >&2

REQUEST='{"model": "stories260K-babi-qa",
  "messages": [{"role": "user", "content": "Mary moved to the bathroom. John went to the hallway. Q: Where is Mary? A:"}],
  "max_tokens": 24, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}'
printf '==> streaming chat completion\n' >&2
run curl -sN "http://127.0.0.1:${HTTP_PORT}/v1/chat/completions" \
  -H 'Content-Type: application/json' -d "${REQUEST}" | tee "${LOG_DIR}/stream.txt"
printf '\n==> assembled answer:\n' >&2
sed -n 's/^data: //p' "${LOG_DIR}/stream.txt" | grep -v '^\[DONE\]' |
  python3 -c 'import sys, json
text = ""
for line in sys.stdin:
    chunk = json.loads(line)
    for c in chunk.get("choices", []):
        text += c.get("delta", {}).get("content") or ""
    if chunk.get("usage"):
        usage = chunk["usage"]
print(text)
print("usage:", usage)'
FANOUT='{"model": "stories260K-babi-qa", "prompt": "Mary moved to the bathroom. John went to the hallway. Where is Mary?",
  "max_tokens": 8, "temperature": 0, "scd": {"fanout": ["stories260K-babi-qa", "stories260K-wiki"]}}'
printf '==> one question to both specialists (scd.fanout: one prefill, one payload)\n' >&2
run curl -s "http://127.0.0.1:${HTTP_PORT}/v1/completions" -H 'Content-Type: application/json' \
  -d "${FANOUT}" | python3 -c 'import sys, json
for c in json.load(sys.stdin)["choices"]:
    print("choice %d (%s): %r" % (c["index"], c["model"], c["text"]))'
printf '==> stopping the daemons\n' >&2
