"""Read verl's console log: what `trainer.logger` "console" prints (verl/utils/logger/aggregate_logger.py,
`LocalLogger` / `concat_dict_to_str`), usually saved with `python3 -m verl.trainer.main_ppo ... | tee verl_demo.log`.

    (TaskRunner pid=1234) step:101 - actor/pg_loss:-0.012 - actor/lr:0.000 - timing_s/gen:5.123 - ...

One line per step: `step:N` then `key:value` pairs joined by " - ", numbers only. How values are printed depends on
the verl version: up to v0.4.1 `f"{v:.3f}"` (3 decimals: an lr of 1e-6 prints as `0.000`); from v0.5.0
`pprint.pformat(v)` (full precision; numpy scalars print as `np.float64(...)` under numpy 2). A value printed as
`0.000` / `-0.000` is therefore unknown, never zero, and is dropped (counted in the import problems); the logged lr of
a 3-decimal log is never used for run.json (the config's lr is, else lr is null with a warning).

Validation metrics (`val-core/...`, older `val/test_score/...`) ride in the step line of the step they follow, and in a
`step:0` line before training (`trainer.val_before_train`); they become eval records as in the JSONL. verl also
pprints `f"Initial validation metrics: {val_metrics}"` (a string repr, wrapped over lines when long); at v0.1 that print
is the only record of the validation before training, so it becomes the step-0 eval when no step-0 line holds one
(likewise `Final validation metrics:` after the last step of a zero-based log, verl_legacy.py). The oldest format's
names and step numbering are rewritten by verl_legacy.py, for every shape.

The config: `main_ppo.py` pprints `OmegaConf.to_container(config, resolve=True)` at start-up, a multi-line Python dict
(each line behind its Ray prefix). It is read with `ast.literal_eval` and flattened to dotted keys
(`data.train_batch_size`, `actor_rollout_ref.rollout.n`, ...), so P, G, lr and the updates per step come from the log.
Every other printed line (Ray, vLLM, tqdm, warnings) is ignored.
"""

from __future__ import annotations

import re
from pathlib import Path

from batchscale.errors import UserError
from batchscale.ingest.common import ParsedLog, RawRow
from batchscale.ingest.console import (
    clean_lines,
    clean_segments,
    parse_printed_number,
    read_literal,
    read_printed_string,
)
from batchscale.ingest.frameworkconfig import flatten_mapping
from batchscale.ingest.launch import attach_launch_options
from batchscale.ingest.runs import Piece, group_runs, several_runs_error
from batchscale.ingest.verl_legacy import BARE_TEST_SCORE, is_bare_validation

STEP_LINE = re.compile(r"^step:(\d+)(?: - (.*))?$")
ROUNDED = re.compile(r"^-?\d+\.\d{3}$")  # a value as verl <= 0.4.1 prints it
UNKNOWN_ZERO = ("0.000", "-0.000")
CONFIG_SECTIONS = ("data", "actor_rollout_ref", "trainer", "algorithm")
CONSOLE_PROBE_LINES = 20000
VALIDATION_PRINT = re.compile(r"(?P<when>Initial|Final) validation metrics: ")


def is_verl_console(text: str) -> bool:
    """True when some printed line of `text` is a verl console step line."""
    for line in text.split("\n")[:CONSOLE_PROBE_LINES]:
        if any(STEP_LINE.match(segment.strip()) for _, segment in clean_segments(line)):
            return True
    return False


def read_verl_console(path: Path, text: str) -> ParsedLog:
    """Parse a verl console log into rows, plus the config it printed (see module docstring)."""
    lines = clean_lines(text)
    parsed = ParsedLog(rows=[], style="verl", shape="console text")
    unknown, unreadable, rounded, values = [], [], 0, 0
    index = 0
    printed_validation = {}  # "Initial" / "Final" -> (line number, metrics)
    unread_configs: list[int] = []  # lines where a printed config starts that does not close or parse
    configs: list[tuple[int, dict]] = []  # (line, flattened config) of every config printed (several: several runs?)
    while index < len(lines):
        number, line = lines[index][:2]
        stripped = line.strip()
        validation = VALIDATION_PRINT.search(stripped)
        if validation and not STEP_LINE.match(stripped):
            metrics, index = read_validation_print(lines, index)
            if metrics:
                printed_validation.setdefault(validation.group("when"), (number, metrics))
            continue
        if stripped.startswith("{") and any(f"'{s}'" in stripped for s in CONFIG_SECTIONS):
            literal = read_literal(lines, index)
            if literal is not None and isinstance(literal[0], dict):
                try:
                    configs.append((number, flatten_mapping(literal[0])))
                except ValueError as e:  # far larger than any config
                    parsed.problems.append(f"the dict printed at line {number} was ignored ({e})")
                else:
                    if not parsed.config:
                        parsed.config = configs[0][1]
                        parsed.config_path = f"{path} (config printed at start-up, line {number})"
                index = literal[1]
                continue
            if number not in unread_configs:
                unread_configs.append(number)
        match = STEP_LINE.match(stripped)
        index += 1
        if not match:
            continue
        metrics = {}
        for pair in (match.group(2) or "").split(" - "):
            key, _, printed = pair.rpartition(":")
            if not key:
                continue
            values += 1
            rounded += bool(ROUNDED.match(printed.strip()))
            if printed.strip() in UNKNOWN_ZERO:
                unknown.append(f"line {number} {key}")
                continue
            value = parse_printed_number(printed)
            if value is None:
                unreadable.append(f"line {number} {key}")
                continue
            metrics[key] = value
        parsed.rows.append(RawRow(step=int(match.group(1)), metrics=metrics, where=f"line {number}"))
    drop_torn_last_line(parsed, text)
    if unread_configs and not parsed.config:
        parsed.problems.append(f"the config printed at line {unread_configs[0]} does not close or parse (a line of it "
                               "is missing or damaged: an edited log?); it was not used")
    if not parsed.rows:
        raise UserError(str(path), "no `step:N - key:value` line", "pass the console log of a verl training run")
    check_printed_configs(path, parsed, configs)
    add_printed_validation(parsed, printed_validation)
    attach_launch_options(parsed, path, lines)
    if values and rounded == values:
        parsed.logged_lr_exact = False
        parsed.notes.append("values are printed with 3 decimals (verl <= 0.4.1 console): precision 0.001")
    if unknown:
        parsed.logged_lr_exact = False
        parsed.problems.append(f"{len(unknown)} value(s) printed as 0.000 treated as unknown, not zero, e.g. "
                               f"{unknown[0]}")
    if unreadable:
        parsed.problems.append(f"{len(unreadable)} value(s) that are not numbers skipped, e.g. {unreadable[0]}")
    return parsed


def check_printed_configs(path: Path, parsed: ParsedLog, configs: list[tuple[int, dict]]) -> None:
    """Each verl start prints its config: a log that printed several (`tee -a` of several launches) is several runs
    when they differ in what defines a run (runs.py); the same config printed again is a resumed run."""
    if len(configs) < 2:
        return
    bounds = [number for number, _ in configs] + [float("inf")]
    pieces = [Piece(name=f"the run started at line {number}", config=config,
                    rows=[row for row in parsed.rows if bounds[i] <= int(row.where.split()[-1]) < bounds[i + 1]])
              for i, (number, config) in enumerate(configs)]
    runs, reasons = group_runs(parsed.style, [piece for piece in pieces if piece.rows], in_order=True)
    if len(runs) > 1:
        raise several_runs_error(str(path), parsed.style, runs, reasons,
                                 "import one run at a time: cut the log before the line where the next run prints "
                                 "its config (e.g. head -n / tail -n +) and import each part")


def read_validation_print(lines: list, index: int) -> tuple[dict, int]:
    """({metric: value}, index after it) of a pprinted `"Initial validation metrics: {...}"` string starting at
    `lines[index]`; ({}, index + 1) when it cannot be read."""
    read = read_printed_string(lines, index)
    if read is None:
        return {}, index + 1
    text, after = read
    found = VALIDATION_PRINT.search(text)
    literal = read_literal([(0, text[found.end():])], 0) if found and "{" in text[found.end():] else None
    if literal is None or not isinstance(literal[0], dict):
        return {}, after
    return {k: float(v) for k, v in literal[0].items()
            if isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)}, after


def add_printed_validation(parsed: ParsedLog, printed: dict) -> None:
    """The printed validation as eval rows where no step line holds it: the initial one at step 0, the final one
    (old names only, a zero-based log) at the number of steps logged."""
    if "Initial" in printed and not any(row.step == 0 and any(is_eval_key(k) for k in row.metrics)
                                        for row in parsed.rows):
        number, metrics = printed["Initial"]
        parsed.rows.insert(0, RawRow(step=0, metrics=metrics, where=f"line {number}"))
        parsed.notes.append(f"the validation before training is read from the 'Initial validation metrics' print "
                            f"(line {number})")
    if "Final" in printed and is_bare_validation(printed["Final"][1]):
        last = max(parsed.rows, key=lambda row: row.step)
        validated = any(is_eval_key(k) for k in last.metrics)  # the last step validated: the same model
        if not validated and not any(is_bare_validation(row.metrics) and row.step > 0 for row in parsed.rows):
            number, metrics = printed["Final"]
            parsed.rows.append(RawRow(step=last.step + 1, metrics=metrics, where=f"line {number}"))


def is_eval_key(key: str) -> bool:
    return key.startswith(("val", BARE_TEST_SCORE))


def drop_torn_last_line(parsed: ParsedLog, text: str) -> None:
    """A log that does not end in a newline was cut mid-line (the run was killed, or the copy is partial): a step
    line there may hold cut values (`timing_s/step:1` of 12.5), so it is dropped, with a warning."""
    if text.endswith("\n"):
        return
    last = f"line {text.count(chr(10)) + 1}"
    if parsed.rows and parsed.rows[-1].where == last:
        parsed.rows.pop()
        parsed.problems.append(f"{last} (the last) is cut mid-line (no newline at the end of the log) and was skipped")


LOGGER_OVERRIDE = re.compile(r"trainer\.logger=(?P<value>\S+)")
VERL_MARKS = ("verl.trainer.main_ppo", "Training Progress:")
WHERE_METRICS_GO = {
    "wandb": "W&B (export the run's history as CSV and import it: batchscale import wandb-csv HISTORY.csv)",
    "tensorboard": "TensorBoard ($TENSORBOARD_DIR, else tensorboard_log/<project_name>/<experiment_name>: batchscale "
                   "import tensorboard DIR)",
    "file": "verl's file logger ($VERL_FILE_LOGGER_PATH, else <project_name>/<experiment_name>.jsonl: batchscale "
            "import verl FILE)",
    "mlflow": "MLflow", "swanlab": "SwanLab", "vemlp_wandb": "W&B (Volcengine)", "clearml": "ClearML",
}


def missing_metrics_error(path: Path, text: str) -> UserError | None:
    """For a verl console with no step line (the run logged its metrics elsewhere, or stopped before its first
    step): an error that says so and where its trainer.logger sent them; None when `text` is no verl console."""
    lines = clean_lines(text[: 64 * 2**20])
    config_line, loggers = None, None
    for index, (number, line, *_) in enumerate(lines):
        stripped = line.strip()
        override = LOGGER_OVERRIDE.search(line)
        if override and loggers is None:
            loggers = [name.strip("'\" ") for name in override.group("value").strip("'\"[]").split(",")]
        if config_line is None and stripped.startswith("{") and any(f"'{s}'" in stripped for s in CONFIG_SECTIONS):
            config_line = number
            literal = read_literal(lines, index)
            if literal is not None and isinstance(literal[0], dict):
                logged = flatten_mapping(literal[0]).get("trainer.logger")
                loggers = [str(v) for v in logged] if isinstance(logged, list) else loggers
    if config_line is None and loggers is None and not any(mark in text for mark in VERL_MARKS):
        return None
    seen = f"the config printed at line {config_line}" if config_line else "verl's start-up lines"
    elsewhere = [WHERE_METRICS_GO.get(name, name) for name in (loggers or []) if name != "console"]
    if loggers is not None and not elsewhere:
        where = ("its trainer.logger is ['console'], so the run stopped before its first step: there are no "
                 "metrics to import")
    elif elsewhere:
        where = f"its trainer.logger {loggers} sent them to {'; '.join(elsewhere)}"
    else:
        where = "verl prints a step line only with 'console' in trainer.logger; look for the run in W&B or TensorBoard"
    return UserError(str(path), f"holds no metrics: a verl console ({seen}) without a single `step:N - key:value` "
                     f"line", f"import the metrics where they went: {where}")