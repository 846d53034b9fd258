#!/usr/bin/env bash
# The one prepared GPU check (issues 19, 44), built for the machine that is lent: its own python3 (3.12, a CUDA build
# of torch 2.11, transformers, numpy, ... but no pydantic), no package registry, 15 minutes of device time a session
# with the machine's start included, at most 8 files back from $OUT.
#
#   bash benchmarks/gpu_check.sh OUT_DIR             run the stages; OUT_DIR gets 4 files: summary.md, summary.json,
#                                                    stages.tsv and logs.tar.gz (every log and result document)
#   bash benchmarks/gpu_check.sh OUT_DIR --dry-run   print the settings and the stages with their limits; run nothing
#
# On the lent machine (README "On a GPU"): the run tool with command 'bash benchmarks/gpu_check.sh "$OUT"',
# carry [".whl"] and timeout_s 420; `make gpu-wheels` fills .whl/ first (benchmarks/gpu_wheels.py). The summary is
# printed last, so it is the end of the run's output.
#
# Stages run in order, each under its own time limit; a stage starts only when its whole limit fits in what is left of
# the budget (GPU_CHECK_BUDGET_S, 360 s: with a machine start of 1-2 minutes, 7-8 minutes of the 15, leaving a rerun).
# Whatever is skipped, failed or timed out is listed with its reason. `preflight` (carried wheels installed with pip
# --no-index --no-deps --target, then benchmarks/gpu_preflight.py) stops every later stage with its reason when CUDA,
# the GPU or an import is missing. SmolLM2-135M and the Qwen2.5-0.5B shape are built from their configs
# (examples/models/) with random weights: real costs, meaningless text; the tiny model is the warm-started copy in git.
#
# Environment (all optional):
#   GPU_CHECK_STAGES     comma list of stages to run (preflight and ceilings always run), e.g. generation_smollm2_hf
#   GPU_CHECK_BUDGET_S   the whole budget in seconds (default 360), the summary's 15 s included
#   GPU_CHECK_PYTHON     the interpreter (default python3: the machine's own, with its CUDA torch)
#   GPU_CHECK_WHEELS     the carried wheels (default .whl)
#   GPU_CHECK_DEVICE     cuda (default), or cpu for the CPU rehearsal (benchmarks/gpu_rehearsal.py)
#   GPU_CHECK_SIZE       full (default), or small: the rehearsal's sizes
#   GPU_CHECK_WORK       scratch folder for logs, results, runs and caches (default: a new one under /tmp)
#   GPU_CHECK_QWEN_MODEL the model of the qwen stages (default examples/models/qwen2.5-0.5b; small: llama-10m)
#   GPU_CHECK_HARDWARE   the preset the profiles compare with (default: the detected GPU's)
#   GPU_CHECK_LIMIT_SCALE  multiplies every stage's limit (default 1; the rehearsal's 2 shared CPU cores need more)
set -u -o pipefail

usage() { echo "usage: bash benchmarks/gpu_check.sh OUT_DIR [--dry-run]" >&2; exit 2; }
OUT="" DRY=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=1 ;;
    -*) usage ;;
    *) [ -z "$OUT" ] && OUT="$arg" || usage ;;
  esac
done
[ -n "$OUT" ] || usage

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUDGET_S="${GPU_CHECK_BUDGET_S:-360}"
RESERVE_S=15   # kept back for the summary and the archive, which always run
PY="${GPU_CHECK_PYTHON:-python3}"
WHEELS="${GPU_CHECK_WHEELS:-$ROOT/.whl}"
DEVICE="${GPU_CHECK_DEVICE:-cuda}"
SIZE="${GPU_CHECK_SIZE:-full}"
SMOL="examples/models/smollm2-135m"
HW="${GPU_CHECK_HARDWARE:+--hardware $GPU_CHECK_HARDWARE}"
case "$DEVICE" in cuda|cpu) ;; *) echo "error: GPU_CHECK_DEVICE: '$DEVICE' is neither cuda nor cpu" >&2; exit 2 ;; esac
SCALE="${GPU_CHECK_LIMIT_SCALE:-1}"
for value in "GPU_CHECK_BUDGET_S=$BUDGET_S" "GPU_CHECK_LIMIT_SCALE=$SCALE"; do
  case "${value#*=}" in ''|*[!0-9]*) echo "error: ${value%%=*}: '${value#*=}' is not a whole number" >&2; exit 2 ;; esac
done

# Sizes. full: the GPU run (estimates per stage in BENCHMARKS.md). small: the CPU rehearsal, which only checks that every
# stage runs and reports in an environment like the GPU's.
if [ "$SIZE" = full ]; then
  LEVELS=1,2,4,8,16,32,64,128,256 GEN_TOKENS=64 GEN_WAVES=2 GEN_MIN=4
  # realistic RL lengths: 128 + 384 tokens per sample (the task's ~11-token samples leave a GPU update launch-bound)
  TRAIN_BATCHES=8,16,32,64,128 QWEN_BATCHES=8,16,32,64 TRAIN_MICRO=8 PROMPT_TOKENS=128 RESPONSE_TOKENS=384 TRAIN_REPEATS=2
  SWEEP_P="4, 8, 16" SWEEP_G=8 SWEEP_BUDGET=1536 SWEEP_EVAL=512 SWEEP_MICRO=32 SWEEP_EVAL_SIZE=256
  SMOL_TRAIN="$SMOL" QWEN="${GPU_CHECK_QWEN_MODEL:-examples/models/qwen2.5-0.5b}"
elif [ "$SIZE" = small ]; then
  LEVELS=1,2 GEN_TOKENS=3 GEN_WAVES=1 GEN_MIN=2
  TRAIN_BATCHES=1,2 QWEN_BATCHES=1,2 TRAIN_MICRO=1 PROMPT_TOKENS=4 RESPONSE_TOKENS=8 TRAIN_REPEATS=1
  SWEEP_P="2, 4" SWEEP_G=4 SWEEP_BUDGET=16 SWEEP_EVAL=8 SWEEP_MICRO=8 SWEEP_EVAL_SIZE=8
  # one update of a 135M (or 494M) model takes tens of seconds on 2 shared CPU cores: the training stages and the
  # qwen stages run llama-10m here (the same commands); the SmolLM2 generation stages still build its 135M shape
  SMOL_TRAIN=examples/models/llama-10m QWEN="${GPU_CHECK_QWEN_MODEL:-examples/models/llama-10m}"
else
  echo "error: GPU_CHECK_SIZE: '$SIZE' is neither full nor small" >&2; exit 2
fi

# name | limit in seconds | what it does (each stage is the function stage_<name> below)
STAGES=(
  "preflight|60|install the carried wheels (pip --no-index --no-deps --target); imports, versions, CUDA, the GPU, bf16"
  "ceilings|30|copy bandwidth and bf16 matmul rate measured on this device (benchmarks/gpu_ceilings.py)"
  "gpu_tests|90|pytest -m gpu on the test files that hold CUDA cases; on CUDA 'all skipped' fails"
  "generation_smollm2_engine|60|profile generation, engine, SmolLM2-135M shape, bf16, concurrency $LEVELS"
  "generation_smollm2_hf|75|profile generation, HF generate, the same workload"
  "training_smollm2|45|profile training, $SMOL_TRAIN, batches $TRAIN_BATCHES x ($PROMPT_TOKENS + $RESPONSE_TOKENS) tokens"
  "grpo_sweep|75|GRPO on the tiny model, P = $SWEEP_P at G = $SWEEP_G, $SWEEP_BUDGET samples; analyze; plan"
  "generation_qwen_engine|60|profile generation, engine, $QWEN"
  "training_qwen|60|profile training, $QWEN, batches $QWEN_BATCHES"
  "generation_qwen_hf|75|profile generation, HF generate, $QWEN"
)
ALWAYS="preflight ceilings"
NAMES=" $(for s in "${STAGES[@]}"; do printf '%s ' "${s%%|*}"; done)"
SELECTED=" ${GPU_CHECK_STAGES:-$NAMES} "
SELECTED="${SELECTED//,/ }"
for name in $SELECTED; do
  case "$NAMES" in *" $name "*) ;; *) echo "error: GPU_CHECK_STAGES: unknown stage '$name'; stages:$NAMES" >&2
                                      exit 2 ;; esac
done

if [ "$DRY" = 1 ]; then
  echo "gpu_check: budget ${BUDGET_S} s (${RESERVE_S} s kept for the summary); device $DEVICE, sizes $SIZE, python" \
    "$PY, limits x $SCALE; stages in order, each with its limit:"
  total=0
  for stage in "${STAGES[@]}"; do
    IFS='|' read -r name limit what <<< "$stage"
    limit=$((limit * SCALE))
    total=$((total + limit))
    printf '  %-26s %3s s  %s\n' "$name" "$limit" "$what"
  done
  printf '  %-26s %3s s  %s\n' "summary" "$RESERVE_S" "benchmarks/gpu_summary.py (stdlib only): summary.md/.json, logs.tar.gz"
  echo "limits add up to ${total} s; a stage starts only when its limit fits in what is left, else it is skipped"
  exit 0
fi

OUT="$(realpath -m "$OUT")"
WORK="${GPU_CHECK_WORK:-$(mktemp -d /tmp/gpu_check.XXXXXX)}"
WORK="$(realpath -m "$WORK")"
case "$WORK/" in "$OUT"/*) echo "error: GPU_CHECK_WORK must lie outside OUT_DIR (only 4 files go there)" >&2
                           exit 2 ;; esac
RESULTS="$WORK/results" LOGS="$WORK/logs" SITE="$WORK/site"
mkdir -p "$OUT" "$RESULTS" "$LOGS" || exit 2
cd "$ROOT" || exit 2
export ROOT PY WHEELS DEVICE SIZE SMOL SMOL_TRAIN QWEN HW WORK RESULTS SITE LEVELS GEN_TOKENS GEN_WAVES GEN_MIN TRAIN_BATCHES \
  QWEN_BATCHES TRAIN_MICRO PROMPT_TOKENS RESPONSE_TOKENS TRAIN_REPEATS SWEEP_P SWEEP_G SWEEP_BUDGET SWEEP_EVAL \
  SWEEP_MICRO SWEEP_EVAL_SIZE
export GPU_CHECK_SITE="$SITE" PYTHONPATH="$ROOT/src:$SITE" BATCHSCALE_CACHE="$WORK/cache" PYTHONUNBUFFERED=1 \
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MPLBACKEND=Agg

bs() { "$PY" -m batchscale "$@"; }
# a document is written whole or not at all: a stage stopped at its limit leaves no truncated JSON
into() { local target="$RESULTS/$1"; shift; "$@" > "$target.part" && mv "$target.part" "$target"; }

stage_preflight() {
  if compgen -G "$WHEELS/*.whl" > /dev/null; then
    "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" "$WHEELS"/*.whl || { echo "pip could not install the carried wheels in $WHEELS"; return 1; }
  else
    echo "no carried wheels in $WHEELS: run benchmarks/gpu_wheels.py here and carry .whl"
  fi
  "$PY" benchmarks/gpu_preflight.py "$RESULTS" "$DEVICE"
}
stage_ceilings() { "$PY" benchmarks/gpu_ceilings.py "$RESULTS" "$DEVICE" "$SIZE"; }
stage_gpu_tests() {
  local files
  files=$(grep -l -E 'DEVICES|mark\.gpu' tests/test_*.py | tr '\n' ' ')
  echo "test files with CUDA cases: $files"
  # shellcheck disable=SC2086
  "$PY" -m pytest -m gpu -q -rs -p no:cacheprovider --junitxml="$RESULTS/gpu_tests.xml" $files
  "$PY" -I benchmarks/gpu_summary.py --tests "$RESULTS/gpu_tests.xml" "$DEVICE"
}
generation() {  # MODEL BACKEND DOCUMENT
  # shellcheck disable=SC2086
  into "$3" bs profile generation --model "$1" --backend "$2" --concurrency "$LEVELS" --dtype bfloat16 \
    --samples-per-prompt 8 --max-new-tokens "$GEN_TOKENS" --repeats 1 --waves "$GEN_WAVES" \
    --min-responses "$GEN_MIN" --device "$DEVICE" $HW --json
}
training() {  # MODEL BATCHES DOCUMENT
  # shellcheck disable=SC2086
  into "$3" bs profile training --model "$1" --batches "$2" --micro-batch-size "$TRAIN_MICRO" \
    --prompt-tokens "$PROMPT_TOKENS" --response-tokens "$RESPONSE_TOKENS" --repeats "$TRAIN_REPEATS" \
    --device "$DEVICE" $HW --json
}
stage_generation_smollm2_engine() { generation "$SMOL" engine generation_smollm2_engine.json; }
stage_generation_smollm2_hf() { generation "$SMOL" hf generation_smollm2_hf.json; }
stage_training_smollm2() { training "$SMOL_TRAIN" "$TRAIN_BATCHES" training_smollm2.json; }
stage_generation_qwen_engine() { generation "$QWEN" engine generation_qwen_engine.json; }
stage_generation_qwen_hf() { generation "$QWEN" hf generation_qwen_hf.json; }
stage_training_qwen() { training "$QWEN" "$QWEN_BATCHES" training_qwen.json; }
stage_grpo_sweep() {
  cat > "$WORK/sweep.toml" <<EOF
# GRPO on the tiny model over P at G = $SWEEP_G, sqrt-LR from B_ref = 128 (examples/sweep-tiny.toml, short)
base = "$ROOT/examples/grpo-tiny.toml"
seeds = [0]

[set]
"run.budget_samples" = $SWEEP_BUDGET
"run.eval_every_samples" = $SWEEP_EVAL
"batch.samples_per_prompt" = $SWEEP_G
"batch.micro_batch_size" = $SWEEP_MICRO
"task.eval_size" = $SWEEP_EVAL_SIZE
"run.device" = "$DEVICE"

[grid]
"batch.prompts_per_step" = [$SWEEP_P]
EOF
  bs sweep "$WORK/sweep.toml" --out "$WORK/sweep" && into analysis.json bs analyze "$WORK/sweep" --json \
    && into plan.json bs plan "$WORK/sweep" --json
}
export -f bs into generation training $(compgen -A function stage_)

STAGE_FILE="$WORK/stages.tsv"
printf 'stage\tstatus\tseconds\tlimit_s\tnote\n' > "$STAGE_FILE"
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$(printf '%s' "$5" | tr '\t\n' '  ' | cut -c1-300)" \
  >> "$STAGE_FILE"; }
printf '{"budget_s": %s, "device": "%s", "size": "%s", "python": "%s", "stages": "%s", "work": "%s", "levels": "%s",
 "prompt_tokens": %s, "response_tokens": %s, "qwen_model": "%s"}\n' "$BUDGET_S" "$DEVICE" "$SIZE" "$PY" \
  "$(echo $SELECTED)" "$WORK" "$LEVELS" "$PROMPT_TOKENS" "$RESPONSE_TOKENS" "$QWEN" > "$RESULTS/settings.json"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv \
    > "$RESULTS/nvidia-smi.csv" 2>&1
fi

start=$SECONDS
failed="" unfit="" ready=""
for entry in "${STAGES[@]}"; do
  IFS='|' read -r name limit what <<< "$entry"
  limit=$((limit * SCALE))
  case "$SELECTED $ALWAYS " in *" $name "*) ;; *) record "$name" skipped 0 "$limit" "not in GPU_CHECK_STAGES"
                                                   continue ;; esac
  if [ -n "$unfit" ]; then
    record "$name" skipped 0 "$limit" "preflight failed: $unfit"
    continue
  fi
  left=$((BUDGET_S - RESERVE_S - (SECONDS - start)))
  if [ "$limit" -gt "$left" ]; then
    record "$name" skipped 0 "$limit" "its ${limit} s limit does not fit in the ${left} s left of the budget"
    echo "gpu_check: $name skipped: ${left} s left of the budget, its limit is ${limit} s" >&2
    continue
  fi
  echo "gpu_check: $name (limit ${limit} s): $what" >&2
  t0=$SECONDS
  timeout --kill-after=5 "$limit" bash -c "stage_$name" > "$LOGS/$name.log" 2>&1
  rc=$?
  took=$((SECONDS - t0))
  last="$(grep -v '^\s*$' "$LOGS/$name.log" | tail -n 1)"
  case $rc in
    0) status=ok note="" ;;
    124|137) status=timeout note="stopped at its ${limit} s limit; last line: $last" ;;
    *) status=failed note="exit $rc: $last" ;;
  esac
  record "$name" "$status" "$took" "$limit" "$note"
  echo "gpu_check: $name $status in ${took} s${note:+: $note}" >&2
  [ "$status" = ok ] || failed="$failed $name"
  [ "$name" = preflight ] && [ "$status" = ok ] && ready=1
  if [ "$name" = preflight ] && [ "$status" != ok ]; then
    unfit="$(grep -h '^preflight: ' "$LOGS/$name.log" | tail -n 1 | cut -c12-)"
    unfit="${unfit:-$note}"
  fi
done

cp "$STAGE_FILE" "$OUT/stages.tsv"
if ! timeout 30 "$PY" -I benchmarks/gpu_summary.py "$WORK" "$OUT" > "$LOGS/summary.log" 2>&1; then
  # python3 itself is broken: the stage table is the summary, and the logs travel as they are
  { echo "# GPU check: the summary script failed ($(tail -n 1 "$LOGS/summary.log"))"; echo; cat "$STAGE_FILE"; } \
    > "$OUT/summary.md"
  tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs results 2> /dev/null
fi
echo "gpu_check: done in $((SECONDS - start)) s;${failed:+ not ok:$failed;} $OUT holds $(ls "$OUT" | tr '\n' ' ')" >&2
cat "$OUT/summary.md"
[ -z "$failed" ] && [ -n "$ready" ]  # 0: the preflight passed and no stage failed or timed out (skips are reported)
