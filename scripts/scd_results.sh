#!/usr/bin/env bash
# Regenerates every SCD figure in docs/RESULTS.md for the bundled pair
# (stories260K -> stories260K-babi-qa): calibration, the all-modes evaluation with the
# patch-budget ablation, and the r_K vs r_V sweep. The artifact goes to configs/calibration/,
# the logs and reports to docs/results/.
# Takes about 10 minutes on 2 cores. Usage: scripts/scd_results.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build}/bin
S=../shared
B=$S/data/babi
OUT=docs/results
CAL=configs/calibration
mkdir -p "$OUT" "$CAL"
CORPUS=$S/data/tinystories_calib.txt,$B/qa1_single-supporting-fact_train.txt,$B/qa2_two-supporting-facts_train.txt
SELECT=$B/qa1_single-supporting-fact_train.txt,$B/qa2_two-supporting-facts_train.txt
DEV=$B/qa1_single-supporting-fact_dev.txt,$B/qa2_two-supporting-facts_dev.txt

echo "== calibrate (int8 codes, ranks 16/24/32, patch budget 3)"
"$BIN/scd-calibrate" --producer $S/models/stories260K --consumer $S/models/stories260K-babi-qa \
  --corpus "$CORPUS" --select-from "$SELECT" --code-dtype int8 --patch-layers 3 \
  --out $CAL/stories260K-babi-qa.scd.safetensors 2>&1 | tee $OUT/calibrate.log

echo "== evaluate every mode, plus the patch-budget ablation k = 0..L"
"$BIN/scd-eval" --producer $S/models/stories260K --consumer $S/models/stories260K-babi-qa \
  --artifact $CAL/stories260K-babi-qa.scd.safetensors --babi "$DEV" --max-examples 0 \
  --text $S/data/tinystories_dev.txt --text-passages 100 --ablate-patch \
  --json $OUT/scd_eval.json --report $OUT/scd_eval 2>&1 | tee $OUT/scd_eval.log

echo "== r_K vs r_V at r_K + r_V = 40 (REUSE only, int8 codes)"
"$BIN/scd-ablate" --producer $S/models/stories260K --consumer $S/models/stories260K-babi-qa \
  --corpus "$CORPUS" --babi "$DEV" --max-per-file 100 --text $S/data/tinystories_dev.txt \
  --total-rank 40 --step 4 --out $OUT/scd_ranks 2>&1 | tee $OUT/scd_ranks.log
