"""What every importer shares: the key-mapping table (as data), the parsed-log types, and key-style detection.

The table below is the single source of truth for how a framework's metric names become batchscale's run-log keys
(DESIGN.md, "The run log"); docs/IMPORT.md renders the same table for people. For each batchscale key, each framework
lists its candidate keys in priority order: the first one present in a step wins (e.g. OpenRLHF's newer
`train/rollout/reward_mean` before its older `train/reward`).

Key styles: a log is read in the vocabulary of the framework that wrote it (`verl`, `openrlhf`, `trl`). TRL runs
exported through TensorBoard or W&B carry the Hugging Face Trainer's rewritten names (`train/reward`, `eval/reward` for
`reward`, `eval_reward`); `normalize_trl_keys` undoes that rewrite so one TRL table serves all three formats.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field

from batchscale.errors import UserError
from batchscale.ingest import newer_frameworks as newer
from batchscale.rundir.run import GNS_STEP_KEYS

# The formats `batchscale import` reads (importer.READERS maps each to its reader).
FORMATS = ("verl", "openrlhf", "tensorboard", "trl", "wandb-csv", "skyrl", "prime-rl", "nemo-rl", "xtuner")
# The key styles (vocabularies) of the frameworks: the first three here, the newer ones in newer_frameworks.py
STYLES = ("verl", "openrlhf", "trl", *newer.STEP_KEYS_BY_FRAMEWORK)
# verl's gradient-variance diagnostics (metric_utils.compute_variance_proxy_metrics, b178a3c), kept under their names
VARIANCE_PROXY_KEYS = ("variance_proxy/proxy1_signal_strength", "variance_proxy/proxy2_total_power",
                       "variance_proxy/proxy3_pure_noise", "variance_proxy/expected_a_squared",
                       "variance_proxy/expected_w")
# logged 0.0 when verl had no gradient norm to compute them from: unknown, not zero
VARIANCE_PROXY_UNSET = ("variance_proxy/proxy1_signal_strength", "variance_proxy/proxy3_pure_noise")
VARIANCE_PROXY_NOTE = (
    "verl's variance_proxy/* are kept under their names: proxy1 = actor/grad_norm^2 (the batch gradient's squared "
    "norm, parameter space), proxy2 = E[A^2 W] (a per-trajectory score-norm proxy from forward quantities: W sums "
    "1 - 2 pi_t + sum pi^2 over the response, the squared norm of the log-prob gradient with respect to the logits), "
    "proxy3 = (proxy2 - proxy1)/(N - 1); they are not batchscale's gradient noise scale B_noise = tr(Sigma)/|G|^2 "
    "(McCandlish et al.), which needs parameter-gradient norms at two batch sizes, and batchscale predict does not use "
    "them (proxy3 mixes a logit-space power with a parameter-space norm)")

# batchscale step key -> framework -> framework keys, first present wins.
STEP_KEY_MAP: dict[str, dict[str, tuple[str, ...]]] = {
    "reward/mean": {
        "verl": ("critic/score/mean",),  # the task score; critic/rewards/mean adds the KL penalty
        "openrlhf": ("train/rollout/reward_mean", "train/reward"),
        "trl": ("reward",),
    },
    "response/length_mean": {
        "verl": ("response_length/mean",),
        "openrlhf": ("train/rollout/response_length_mean", "train/response_length"),
        "trl": ("completions/mean_length", "completion_length"),  # TRL before April 2025: completion_length
    },
    # generation: the largest present phase wins (GENERATION_KEYS); verl's `gen` times the driver's generate call,
    # `generate_sequences` the workers' (sync rollout), `generate_async` the one-step-off-policy rollout, and custom
    # trainers time filtered rollouts as `get_batch_rollout_with_filtering`
    "time/generate": {"verl": ("timing_s/gen", "timing_s/generate_sequences", "timing_s/generate_async",
                               "timing_s/get_batch_rollout_with_filtering"),
                      "openrlhf": ("train/timing/generation",),
                      "trl": ("time/generate",)},  # TRL logs no phase times; batchscale's callback does
    "time/generate_max": {"verl": ("timing_s/gen_max",), "openrlhf": (), "trl": ()},
    "time/train": {"verl": ("timing_s/update_actor",), "openrlhf": ("train/timing/ppo_train",),
                   "trl": ("time/train",)},
    "time/train_critic": {"verl": ("timing_s/update_critic",), "openrlhf": (), "trl": ()},
    "time/step": {"verl": ("timing_s/step",), "openrlhf": ("train/timing/step_total",), "trl": ("step_time",)},
    "grad_norm/actor": {"verl": ("actor/grad_norm",), "openrlhf": ("train/actor_grad_norm",), "trl": ("grad_norm",)},
    "lr/actor": {"verl": ("actor/lr",), "openrlhf": ("train/actor_lr",), "trl": ("learning_rate",)},
    "grad_norm/critic": {"verl": ("critic/grad_norm",), "openrlhf": ("train/critic_grad_norm",), "trl": ()},
    "lr/critic": {"verl": ("critic/lr",), "openrlhf": ("train/critic_lr",), "trl": ()},
    # the online gradient noise scale: in a TRL log, from batchscale's callback (integrations.trl), under these names
    **{key: {"verl": (), "openrlhf": (), "trl": (key,)} for key in GNS_STEP_KEYS["actor"].values()},
    # optional keys of newer logs (DESIGN.md's async/* and time/wait_for_samples; the rest documented in IMPORT.md):
    # verl's fully-async trainer (experimental/fully_async_policy, b178a3c) and its MFU estimates
    "time/weight_sync": {"verl": ("timing_s/param_sync",)},
    "time/wait_for_samples": {"verl": ("fully_async/total_wait_time",)},
    "async/partial_frac": {"verl": ("fully_async/partial/partial_ratio",)},
    "async/staleness_max": {"verl": ("fully_async/partial/max_partial_span",)},
    "mfu/actor": {"verl": ("perf/mfu/actor",)},
    "mfu/critic": {"verl": ("perf/mfu/critic",)},
    **{key: {"verl": (key,)} for key in VARIANCE_PROXY_KEYS},
}
for _framework, _table in newer.STEP_KEYS_BY_FRAMEWORK.items():
    for _key, _candidates in _table.items():
        STEP_KEY_MAP.setdefault(_key, {})[_framework] = _candidates
for _per_framework in STEP_KEY_MAP.values():
    for _style in STYLES:
        _per_framework.setdefault(_style, ())
# batchscale keys whose logged null is a value, kept as null (not dropped): gns/b_noise null is "not resolved"
NULL_KEPT = frozenset({GNS_STEP_KEYS["actor"]["b_noise"]})

LARGEST_WINS = frozenset({"time/generate"})  # batchscale keys whose candidates are phases: the largest present wins
# Other keys that look like a generation phase (custom trainers): a warning when one exceeds time/generate.
GENERATION_LIKE = {"verl": r"^timing_s/(?!gen_max$|agent_loop/).*(gen|rollout)", "openrlhf": r"^train/timing/.*gen",
                   **newer.GENERATION_LIKE}

# Keys that reveal filtering / dynamic sampling (more samples generated than consumed): verl's DAPO recipe counts
# generation rounds in `train/num_gen_batches`; custom trainers log filtered ratios; OpenRLHF logs its pass rate.
FILTER_KEY_PATTERNS: dict[str, tuple[str, ...]] = {
    "verl": (r"^train/num_gen_batches$", r"too_(bad|good)", r"filter"),
    "openrlhf": (r"dynamic_filtering",),
    "trl": (),
    **{style: () for style in newer.STEP_KEYS_BY_FRAMEWORK},
}
GENERATED_COUNT_KEYS = {"verl": (), "openrlhf": ("train/rollout/num_samples",), "trl": (),
                        **{style: () for style in newer.STEP_KEYS_BY_FRAMEWORK}}

# Eval keys: framework prefix -> prefix of the batchscale name under `eval/` (all eval metrics are kept).
EVAL_PREFIXES: dict[str, dict[str, str]] = {
    "verl": {"val-core/": "", "val-aux/": "aux/", "val/": ""},
    "openrlhf": {"eval/": ""},
    "trl": {"eval_": ""},
    **newer.EVAL_PREFIXES,
}

# Accuracy-like eval metrics, matched against the name after EVAL_PREFIXES; the first rule with any match wins and
# `eval/accuracy` is the mean over its matches (one per data source). verl's rule-based scorers return 1 for a correct
# answer and 0 otherwise, so `<source>/reward/mean@N` is an accuracy; an explicit `acc` variable is preferred.
ACCURACY_RULES: dict[str, tuple[str, ...]] = {
    "verl": (r"^(?!aux/).+/acc/mean@\d+$", r"^(?!aux/).+/reward/mean@\d+$", r"^test_score/.+$"),
    "openrlhf": (r"(^|[/_])(acc|accuracy)$", r"(^|[/_])pass@?1$"),
    "trl": (r"^accuracy$", r"^rewards/[^/]*acc[^/]*/mean$"),
    **newer.ACCURACY_RULES,
}
# With no accuracy-like metric, the primary score goes to `eval/score` (DESIGN.md): the mean reward.
SCORE_RULES: dict[str, tuple[str, ...]] = {
    "verl": (),
    "openrlhf": (r"(^|[/_])reward(_mean)?$",),
    "trl": (r"^reward$",),
    **newer.SCORE_RULES,
}

# Known bookkeeping keys: neither mapped nor reported as unknown.
BOOKKEEPING_KEYS: dict[str, frozenset[str]] = {
    "verl": frozenset({"training/global_step", "training/epoch"}),
    "openrlhf": frozenset({"train/global_step", "eval/global_step", "eval/epoch", "train/rollout/num_samples"}),
    "trl": frozenset({"step", "global_step", "epoch", "total_flos", "train_runtime", "train_loss",
                      "train_samples_per_second", "train_steps_per_second"}),
    **newer.BOOKKEEPING_KEYS,
}

# Families of known keys (read by a reader, or summed into a mapped key) that are not reported as unknown.
KNOWN_KEY_PATTERNS: dict[str, tuple[str, ...]] = {
    "verl": (),
    "openrlhf": (),
    "trl": (r"^rewards/[^/]+/(mean|std)$",),
    **newer.KNOWN_KEY_PATTERNS,
}

STEP_KEYS: dict[str, tuple[str, ...]] = {  # where each framework logs its step, in priority order
    "verl": ("training/global_step",),
    "openrlhf": ("train/global_step", "eval/global_step"),
    "trl": ("step",),
    **newer.STEP_KEYS,
}

# Contract keys of a step record (DESIGN.md) a log may lack; missing ones are listed as "not provided by <framework>".
@dataclass
class RawRow:
    """One logged row: a step, its metrics under the framework's names, and where it came from (for messages)."""

    step: int
    metrics: dict[str, float]
    where: str
    time_s: float | None = None  # timestamp (epoch seconds, or seconds since start) when the format has one


@dataclass
class ParsedLog:
    """What a format reader hands to the record builder."""

    rows: list[RawRow]
    style: str  # the framework vocabulary of the keys: verl | openrlhf | trl
    start_time_s: float | None = None  # timestamp of the run's start on the rows' clock, when known
    config: dict = field(default_factory=dict)  # flattened framework config found or given (verl config.yaml)
    config_path: str | None = None
    problems: list[str] = field(default_factory=list)  # tolerated damage, reported in the run descriptor and on stderr
    notes: list[str] = field(default_factory=list)
    window_note: str | None = None  # set when rows average over a logging window (TRL)
    step_window: int = 1  # optimizer steps one logged row stands for (TRL's logging_steps); fixes where wall_s starts
    shape: str = ""  # which shape of the format was read (verl: file logger JSONL, flat JSONL, console text)
    logged_lr_exact: bool = True  # False when printed values are rounded (verl's 3-decimal console): no lr from them
    run_name: str | None = None  # one run of a multi-run file (W&B chart export)
    batch_hints: dict = field(default_factory=dict)  # P/G the file suggests but flags may override (TRL state)
    hint_reasons: dict = field(default_factory=dict)  # why a hint holds, noted when the hint is used
    command_config: dict = field(default_factory=dict)  # launch options printed in the log (launch.py), flattened
    command_path: str | None = None  # where they were found, for messages


def eval_name(style: str, key: str) -> str | None:
    """The name under `eval/` of a framework eval key, or None when `key` is not an eval key."""
    if key in BOOKKEEPING_KEYS[style]:
        return None
    for prefix, replacement in EVAL_PREFIXES[style].items():
        if key.startswith(prefix) and len(key) > len(prefix):
            return replacement + key[len(prefix):]
    return None


@functools.cache
def mapped_keys(style: str) -> frozenset[str]:
    """Every framework key the table maps for `style` (step keys only)."""
    return frozenset(key for per_framework in STEP_KEY_MAP.values() for key in per_framework[style])


def is_known_key(style: str, key: str) -> bool:
    """True when `key` is mapped, an eval key, a step key or bookkeeping for `style`."""
    return (key in mapped_keys(style) or eval_name(style, key) is not None or key in BOOKKEEPING_KEYS[style]
            or key in STEP_KEYS[style] or any(re.search(rule, key) for rule in KNOWN_KEY_PATTERNS[style]))


def pick_eval_primary(style: str, eval_metrics: dict[str, float]) -> tuple[str, float] | None:
    """("eval/accuracy" | "eval/score", value) from one step's eval metrics (names after the prefix), or None."""
    for target, rules in (("eval/accuracy", ACCURACY_RULES[style]), ("eval/score", SCORE_RULES[style])):
        for rule in rules:
            values = [v for name, v in sorted(eval_metrics.items()) if re.search(rule, name)]
            if values:
                return target, sum(values) / len(values)
    return None


def normalize_trl_keys(metrics: dict[str, float]) -> dict[str, float]:
    """Undo the Hugging Face Trainer's logger rewrite: `train/x` -> `x`, `eval/x` -> `eval_x` (TensorBoard, W&B)."""
    out = {}
    for key, value in metrics.items():
        if key.startswith("train/"):
            out[key[len("train/"):]] = value
        elif key.startswith("eval/"):
            out["eval_" + key[len("eval/"):]] = value
        else:
            out[key] = value
    return out


def detect_style(keys: set[str]) -> tuple[str, bool]:
    """(style, trl_rewritten) explaining most of `keys`; ties go to verl, then OpenRLHF, TRL and the newer frameworks
    in newer_frameworks.py's order; no match -> ("", False)."""
    candidates = [
        ("verl", False, sum(is_known_key("verl", k) for k in keys)),
        ("openrlhf", False, sum(k in mapped_keys("openrlhf") or k in BOOKKEEPING_KEYS["openrlhf"] for k in keys)),
        ("trl", True, sum(k in mapped_keys("trl") or k in BOOKKEEPING_KEYS["trl"]
                          for k in normalize_trl_keys(dict.fromkeys(keys, 0.0)))),
        *((style, False, sum(k in mapped_keys(style) or k in BOOKKEEPING_KEYS[style] for k in keys))
          for style in newer.STEP_KEYS_BY_FRAMEWORK),
    ]
    style, rewritten, hits = max(candidates, key=lambda c: c[2])  # max keeps the first of equal scores
    return (style, rewritten) if hits else ("", False)


def parse_number(value, where: str, key: str, path: str) -> float | None:
    """A finite float from a logged value; None for NaN/inf/null (dropped); UserError naming the place otherwise."""
    if value is None:  # TRL logs None for a metric with no valid value in the window
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        number = None
    else:
        try:
            number = float(value)
        except ValueError:
            number = None
    if number is None:
        raise UserError(
            f"{path}: {where}, key '{key}'",
            f"a mapped metric must be numeric, got {value!r}",
            "repair or delete that entry in the log (mapped keys are listed in docs/IMPORT.md)",
        )
    return number if math.isfinite(number) else None


def parse_step(value, where: str, fix: str) -> int:
    """A step number from a logged value (an int, or a float/string holding one); UserError naming `where` otherwise."""
    try:
        number = float(value)
        valid = not isinstance(value, bool) and number >= 0 and number.is_integer()
    except (TypeError, ValueError):
        valid = False
    if not valid:
        raise UserError(where, f"the step must be a non-negative integer, got {value!r}", fix)
    return int(number)
