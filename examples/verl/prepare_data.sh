#!/usr/bin/env bash
# Data for TA-GRPO on verl: N=3 neighbors per MATH question, then verl's parquet (one row per family).
# Usage: bash examples/verl/prepare_data.sh MATH_TRAIN.jsonl OUT_DIR [--backend openai --model gpt-4o ...]
# MATH train has `problem` / `solution` fields, which tagrpo reads as question / answer.
set -euo pipefail
IN=${1:?input .jsonl/.parquet with question/answer (or problem/solution)}
OUT=${2:?output directory}
shift 2
mkdir -p "$OUT"
# the paper used GPT-4-Turbo rewordings (paraphrase, variable renaming, format change):
#   --backend openai --model gpt-4-turbo ; the default here is the offline `rules` backend
tagrpo neighbors --input "$IN" --output "$OUT/neighbors.jsonl" --n 3 --store "$OUT/neighbors.sqlite" "$@"
# verl applies the model's chat template at rollout: the parquet holds plain chat messages
tagrpo export verl --input "$OUT/neighbors.jsonl" --output "$OUT/train.parquet" --n 3
