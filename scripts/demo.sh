#!/usr/bin/env bash
# Demo: generates a continuation with the bundled stories260K model on the CPU backend and
# prints prompt + continuation as one text. (The disaggregated demo, a prefill daemon feeding
# decode daemons, will replace this.) Extra arguments go to scd-generate, e.g.
# `--temperature 0.8 --seed 7`. Environment: BUILD_DIR (default build).
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
MODEL=../shared/models/stories260K
PROMPT="Once upon a time, there was a little girl named Lily."

run() { printf '+' >&2; printf ' %q' "$@" >&2; printf '\n' >&2; "$@"; }

if [[ ! -x "${BUILD_DIR}/bin/scd-generate" ]]; then
  printf '==> %s/bin/scd-generate is missing; building it\n' "${BUILD_DIR}" >&2
  [[ -f "${BUILD_DIR}/CMakeCache.txt" ]] ||
    run cmake -S . -B "${BUILD_DIR}" -G Ninja -DCMAKE_BUILD_TYPE=Release
  run cmake --build "${BUILD_DIR}" --target scd-generate
fi
printf '%s' "${PROMPT}"
run "${BUILD_DIR}/bin/scd-generate" --model "${MODEL}" --prompt "${PROMPT}" --max-tokens 100 "$@"
