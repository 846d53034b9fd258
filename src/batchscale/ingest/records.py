"""Turn a parsed framework log into run-log records (DESIGN.md "The run log") plus the run descriptor's `import`
block.

Per step (rows with the same step are merged; a later row wins, as in a resumed run):
- a `step` record when any mapped training key is present: mapped keys (common.STEP_KEY_MAP), `prompts` = P and
  `tokens/generated` = response/length_mean x P x G (derived: no framework logs the total directly);
- an `eval` record when any eval key is present: every eval metric under `eval/`, plus `eval/accuracy` (or `eval/score`)
  chosen by common.ACCURACY_RULES / SCORE_RULES.
Cumulative samples are step x P x G: the step is the rollout boundary and every framework here consumes P x G responses
per step; where the logged token counts show a batch that varies (dynamic sampling), the running sum of the per-step
counts. An eval at step 0 (before training) gets samples 0.

wall_s, in order of preference:
1. cumulative sum of `time/step` over step records, each weighted by the steps it stands for (step - previous logged
   step), which covers TRL's logging windows and gaps in any log; used only when every step record has `time/step`.
   The first record stands for one logging window (ParsedLog.step_window): a log that starts later (a resumed run,
   first step 101) starts its clock at its first logged step, since the time of the steps before it is unknown;
2. the row timestamps minus the run's start (TensorBoard event times, W&B `_runtime`);
3. null, with a note.
"""

from __future__ import annotations

import re
import statistics

from batchscale.errors import UserError
from batchscale.ingest.common import (
    BOOKKEEPING_KEYS,
    FILTER_KEY_PATTERNS,
    GENERATED_COUNT_KEYS,
    GENERATION_LIKE,
    LARGEST_WINS,
    NULL_KEPT,
    STEP_KEY_MAP,
    STEP_KEYS as LOG_STEP_KEYS,  # where each framework logs its step (rundir's STEP_KEYS: the contract's keys)
    VARIANCE_PROXY_KEYS,
    VARIANCE_PROXY_NOTE,
    VARIANCE_PROXY_UNSET,
    ParsedLog,
    eval_name,
    is_known_key,
    mapped_keys,
    parse_number,
    pick_eval_primary,
)
from batchscale.rundir.run import CRITIC_STEP_KEYS, STEP_KEYS


def merge_rows_by_step(parsed: ParsedLog, path: str, dropped: list[str]) -> dict[int, dict]:
    """step -> {"metrics": merged metrics, "time_s": earliest timestamp}; duplicates noted.

    Mapped and eval values are checked here, row by row, so an error names the row that holds the bad value; NaN/inf
    values are dropped (listed in `dropped`), and so are nulls, except those of NULL_KEPT keys (gns/b_noise).
    Unmapped keys keep their raw values (only their names are reported). A step is "logged more than once" when two
    of its rows share a key other than bookkeeping (step, epoch, ...: TRL's closing summary shares those).
    The earliest timestamp marks the end of the step's training: a framework logs a step's scalars together when the
    step ends, and an eval logged later at the same step must not make the step look slower.
    """
    checked_keys = mapped_keys(parsed.style)
    null_kept = {key for name in NULL_KEPT for key in STEP_KEY_MAP[name][parsed.style]}
    bookkeeping = BOOKKEEPING_KEYS[parsed.style] | set(LOG_STEP_KEYS[parsed.style])
    merged: dict[int, dict] = {}
    overwritten_steps: set[int] = set()
    for row in parsed.rows:
        entry = merged.setdefault(row.step, {"metrics": {}, "time_s": None})
        if (set(row.metrics) & set(entry["metrics"])) - bookkeeping:
            overwritten_steps.add(row.step)
        for key, raw in row.metrics.items():
            if raw is None and key in null_kept:
                pass  # a null that means something (NULL_KEPT): kept
            elif key in checked_keys or eval_name(parsed.style, key) is not None:
                value = parse_number(raw, row.where, key, path)
                if value is None:
                    dropped.append(f"{row.where} {key}")
                    entry["metrics"].pop(key, None)
                    continue
                raw = value
            entry["metrics"][key] = raw
        if row.time_s is not None:
            entry["time_s"] = row.time_s if entry["time_s"] is None else min(entry["time_s"], row.time_s)
    if overwritten_steps:
        parsed.problems.append(
            f"{len(overwritten_steps)} step(s) logged more than once (resumed run?), e.g. step"
            f" {min(overwritten_steps)}; the later value was kept"
        )
    return dict(sorted(merged.items()))


def map_step_metrics(style: str, metrics: dict) -> dict[str, float]:
    """batchscale step key -> value for one step (the first present framework key of the table wins; for the phases
    of LARGEST_WINS, the largest)."""
    record = {}
    for batchscale_key, per_framework in STEP_KEY_MAP.items():
        present = [key for key in per_framework[style] if key in metrics]
        if present:
            key = max(present, key=metrics.__getitem__) if batchscale_key in LARGEST_WINS else present[0]
            record[batchscale_key] = metrics[key]
    return record


def check_generation_keys(style: str, merged: dict[int, dict], problems: list[str]) -> None:
    """Warn about steps whose generation time may be wrong: the primary generation key missing or smaller than
    another generation-like key (the largest mapped phase is used), or no generation key where other steps have one."""
    candidates, like_rule = STEP_KEY_MAP["time/generate"][style], GENERATION_LIKE.get(style)
    if not candidates or like_rule is None:
        return
    primary, timed, odd, missing = candidates[0], 0, [], []
    for step, entry in merged.items():
        metrics = entry["metrics"]
        if not any(key in mapped_keys(style) for key in metrics):
            continue  # an eval-only row
        present = [key for key in candidates if key in metrics]
        like = [key for key in metrics if re.search(like_rule, key) and type(metrics[key]) in (int, float)]
        if not present:
            missing.append(step)
            continue
        timed += 1
        largest = max(present + like, key=metrics.__getitem__)
        if primary not in metrics or metrics[primary] < metrics[largest]:
            odd.append((step, largest))
    if odd:
        problems.append(f"time/generate: in {len(odd)} step(s) {primary} is missing or smaller than another "
                        f"generation phase (e.g. {odd[0][1]} at step {odd[0][0]}); the largest mapped phase was used")
    if missing and timed:
        problems.append(f"time/generate: {len(missing)} step(s) log no generation time (e.g. step {missing[0]})")


def check_filtering(style: str, merged: dict[int, dict], samples_per_step: int, problems: list[str]) -> None:
    """Warn when the log shows filtering / dynamic sampling: samples generated then exceed samples consumed."""
    for step, entry in merged.items():
        metrics = entry["metrics"]
        hit = next((k for k in metrics if any(re.search(rule, k) for rule in FILTER_KEY_PATTERNS[style])), None)
        generated = next((metrics[k] for k in GENERATED_COUNT_KEYS[style] if k in metrics), None)
        if hit is None and not (isinstance(generated, (int, float)) and generated > samples_per_step * 1.05):
            continue
        evidence = f"key {hit}" if hit else f"{generated:g} samples generated for {samples_per_step} consumed"
        problems.append(f"filtering / dynamic sampling detected ({evidence} at step {step}): samples consumed "
                        "(step x P x G, the sample axis) and samples generated differ, so throughput from this run "
                        "counts consumed samples only")
        return


def map_eval_metrics(style: str, metrics: dict) -> dict[str, float]:
    """Eval metric name (without `eval/`) -> value for one step."""
    names = {key: eval_name(style, key) for key in metrics}
    return {name: metrics[key] for key, name in names.items() if name is not None}


def cumulative_samples(steps: list[int], samples_per_step: int, counts: dict[int, float] | None) -> dict[int, int]:
    """step -> cumulative samples: step x P x G, or, with per-step counts (a batch that varies, batch_size.py), their
    running sum, a step without a count taking the median count."""
    if not counts:
        return {step: step * samples_per_step for step in steps}
    fallback = statistics.median(counts.values())
    total, previous, out = 0.0, 0, {}
    for step in sorted(steps):
        total += sum(counts.get(s, fallback) for s in range(previous + 1, step + 1))
        previous = max(previous, step)
        out[step] = round(total)
    return out


def build_records(parsed: ParsedLog, path: str, samples_per_step: int, prompts_per_step: int,
                  samples_by_step: dict[int, float] | None = None) -> tuple[list, dict]:
    """(records, report): run-log records in step order and the facts for the descriptor's `import` block.
    `samples_by_step` (P x G per step, from the logged tokens) replaces step x P x G where the batch varies."""
    style = parsed.style
    dropped: list[str] = []
    merged = merge_rows_by_step(parsed, path, dropped)
    samples_at = cumulative_samples(list(merged), samples_per_step, samples_by_step)
    check_generation_keys(style, merged, parsed.problems)
    check_filtering(style, merged, samples_per_step, parsed.problems)
    unknown_keys: set[str] = set()
    step_records, eval_records = [], []
    for step, entry in merged.items():
        metrics = entry["metrics"]
        unknown_keys.update(k for k in metrics if not is_known_key(style, k))
        base = {"step": step, "samples": samples_at[step], "wall_s": None, "_time_s": entry["time_s"]}
        mapped = map_step_metrics(style, metrics)
        if style == "verl" and "actor/grad_norm" not in metrics:  # verl logs 0.0 when it had no gradient norm
            for key in VARIANCE_PROXY_UNSET:
                if mapped.get(key) == 0.0:
                    mapped.pop(key)
        if mapped:
            if "response/length_mean" in mapped:
                step_samples = (samples_by_step or {}).get(step, samples_per_step)
                mapped["tokens/generated"] = round(mapped["response/length_mean"] * step_samples)
            step_records.append({"kind": "step", **base, "prompts": prompts_per_step, **mapped})
        evals = map_eval_metrics(style, metrics)
        if evals:
            primary = pick_eval_primary(style, evals)
            record = {"kind": "eval", **base}
            if primary is not None:
                record[primary[0]] = primary[1]
            record.update({f"eval/{name}": value for name, value in sorted(evals.items())})
            eval_records.append(record)
    if not step_records and not eval_records:
        raise UserError(
            path,
            f"no usable records: none of the {len(merged)} logged step(s) has a key batchscale maps for {style}",
            "check FORMAT and that PATH is the training log (the mapped keys are listed in docs/IMPORT.md)",
        )
    if dropped:
        parsed.problems.append(f"{len(dropped)} non-finite value(s) (NaN/inf) dropped, e.g. {dropped[0]}")
    first_step = first_covered_step(parsed, step_records)
    wall_note = assign_wall_seconds(step_records, eval_records, parsed.start_time_s, first_step)
    records = sorted(step_records + eval_records, key=lambda r: (r["step"], r["kind"] != "step"))
    for record in records:
        record.pop("_time_s")
    report = {
        "unknown_keys": sorted(unknown_keys),
        "not_provided": list_missing_keys(style, step_records),
        "wall_s_from": wall_note,
        "eval_primary": sorted({k for r in eval_records for k in ("eval/accuracy", "eval/score") if k in r}),
        "first_step": first_step,
    }
    if any("tokens/generated" in r for r in step_records):
        parsed.notes.append("tokens/generated is derived: response/length_mean x samples_per_step")
    if any(key in r for r in step_records for key in VARIANCE_PROXY_KEYS):
        parsed.notes.append(VARIANCE_PROXY_NOTE)
    note_logged_throughput(step_records, samples_per_step, samples_by_step, parsed.notes)
    if eval_records and not report["eval_primary"]:
        parsed.notes.append("no accuracy-like eval metric found; eval records carry their metrics under eval/ only")
    return records, report


def first_covered_step(parsed: ParsedLog, step_records: list) -> int:
    """The first step the log covers: its first logged step, less the window that row averages (TRL); > 1 when the
    log starts late (resumed or truncated), which is noted."""
    if not step_records:
        return 1
    logged = step_records[0]["step"]
    first = max(logged - parsed.step_window + 1, 1) if logged >= 1 else 1
    if first > 1:
        parsed.notes.append(
            f"the log starts at step {logged} (a resumed or truncated run): samples count from the logged step "
            f"(step x P x G), wall_s starts at step {first} (the time before it is unknown), and the target's "
            "baseline is the first logged eval, not step 0")
    return first


def assign_wall_seconds(step_records: list, eval_records: list, start_time_s: float | None, first_step: int = 1) -> str:
    """Fill `wall_s` in place (see module docstring); returns how it was derived."""
    if step_records and all("time/step" in r for r in step_records):
        elapsed_s, previous_step = 0.0, first_step - 1
        for record in step_records:
            elapsed_s += record["time/step"] * max(record["step"] - previous_step, 1)
            previous_step = record["step"]
            record["wall_s"] = round(elapsed_s, 6)
        source = "cumulative time/step"
    elif start_time_s is not None and all(r["_time_s"] is not None for r in step_records):
        for record in step_records:
            record["wall_s"] = round(max(record["_time_s"] - start_time_s, 0.0), 6)
        source = "timestamps"
    else:
        for record in step_records:
            record["wall_s"] = None
        source = "unavailable: the log has neither a per-step time nor timestamps; wall_s is null"
    wall_by_step = {r["step"]: r["wall_s"] for r in step_records}
    for record in eval_records:
        step, time_s = record["step"], record["_time_s"]
        if step in wall_by_step:
            record["wall_s"] = wall_by_step[step]
        elif source == "timestamps" and time_s is not None:
            record["wall_s"] = round(max(time_s - start_time_s, 0.0), 6)
        elif source.startswith("unavailable"):
            record["wall_s"] = None
        else:  # training time elapsed by this eval: that of the last step logged before it (0 before training)
            earlier = [wall for logged_step, wall in wall_by_step.items() if logged_step < step]
            record["wall_s"] = earlier[-1] if earlier else 0.0
    return source


def list_missing_keys(style: str, step_records: list) -> list[str]:
    """Contract step keys absent from every step record, as "key: not provided by <framework>" lines."""
    present = {k for r in step_records for k in r}
    wanted = [key for key in STEP_KEYS if key != "prompts"]  # prompts is P, which the importer writes itself
    if present & set(CRITIC_STEP_KEYS):
        wanted += CRITIC_STEP_KEYS  # a PPO run: the critic keys are part of its contract
    return [f"{key}: not provided by {style}" for key in wanted if key not in present]


def note_logged_throughput(step_records: list, samples_per_step: int, samples_by_step: dict | None,
                           notes: list[str]) -> None:
    """Where the log states its own per-GPU sample throughput (xtuner's throughput/effective_sgs, NeMo-RL's
    performance/samples_per_sec_per_gpu), the GPU count it implies: q of the step (samples / time/step) over it."""
    key = "throughput/samples_per_s_per_gpu"
    gpus = [(samples_by_step or {}).get(r["step"], samples_per_step) / r["time/step"] / r[key] for r in step_records
            if r.get(key) and r.get("time/step")]
    if gpus:
        middle = statistics.median(gpus)
        notes.append(f"the log's {key} x {middle:.2f} training GPUs = samples per step / time/step, batchscale's q "
                     f"of the step (the implied GPU count varies by {max(gpus) / min(gpus) - 1:.1%} over "
                     f"{len(gpus)} steps)")
