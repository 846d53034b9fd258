"""Launch commands inside a console log, read as evidence for the run's config: P, G, lr, mini-batch, epochs, ranks.

Logs often begin with what started them: a `bash -x` trace (`+ python3 -m verl.trainer.main_ppo
data.train_batch_size=1024 ... actor_rollout_ref.rollout.n=5`), the launch script pasted in a fence (one override per
line, ending in `\\`), a `command:` header, or overrides quoted anywhere in a line. Two kinds of option are read:

- Hydra overrides `key=value` (verl, `python3 -m verl.trainer.main_ppo`), `+key=` and `++key=` too;
- `--key value` / `--key=value` flags (OpenRLHF's `train_ppo_ray`, old flat and new dotted names).

Only keys the importer knows are read (frameworkconfig.CONFIG_KEYS, and verl's `trainer.nnodes`,
`trainer.n_gpus_per_node`, `actor_rollout_ref.actor.strategy`, `ulysses_sequence_parallel_size` for the
data-parallel size), so an unrelated `a.b=c` in a log line is ignored. A value that is a shell variable (`$P`,
`${P}`) is unresolved and skipped, noted. Where the log repeats a key with different values (a retried launch), the
last one is used and the disagreement is a warning. The result is a flat config with the same precedence and checks
as a config file, below a config the log printed or one given: batch_size.resolve_batch.
"""

from __future__ import annotations

import re

from batchscale.ingest.frameworkconfig import CONFIG_KEYS

HYDRA_OVERRIDE = re.compile(r"(?:^|[\s'\"(\[,])\+{0,2}(?P<key>[A-Za-z_][\w-]*(?:\.[\w-]+)+)="
                            r"(?P<value>\"[^\"]*\"|'[^']*'|[^\s'\"\\,)\]]+)")
FLAG = re.compile(r"(?:^|\s)--(?P<key>[A-Za-z_][\w.-]*)(?:=|\s+)(?P<value>\"[^\"]*\"|'[^']*'|[^\s\\-][^\s\\]*"
                  r"|-\d[^\s\\]*)")
EXTRA_KEYS = {"verl": ("trainer.nnodes", "trainer.n_gpus_per_node", "actor_rollout_ref.actor.strategy",
                       "actor_rollout_ref.actor.ulysses_sequence_parallel_size")}


def known_keys(style: str) -> frozenset[str]:
    return frozenset(key for per_framework in CONFIG_KEYS.values() for key in per_framework.get(style, ())) | \
        frozenset(EXTRA_KEYS.get(style, ()))


def parse_value(text: str):
    """A command-line value as YAML would read the common cases: int, float, true/false, else the string."""
    text = text.strip("'\"")
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "null": None}.get(text.lower(), text)


def read_launch_options(lines: list, style: str, problems: list[str],
                        notes: list[str]) -> tuple[dict, list[int]]:
    """({dotted key: value}, line numbers) of the launch options found in a console's cleaned lines."""
    keys = known_keys(style)
    pattern = FLAG if style == "openrlhf" else HYDRA_OVERRIDE
    found: dict[str, tuple[object, int]] = {}
    unresolved, disagreements = [], []
    for number, line, *_ in lines:
        if "=" not in line and "--" not in line:
            continue
        for match in pattern.finditer(line):
            key = match.group("key")
            if key not in keys:
                continue
            raw = match.group("value").strip("'\"")
            if "$" in raw:
                unresolved.append(f"{key}={raw} (line {number})")
                continue
            value = parse_value(raw)
            if key in found and found[key][0] != value:
                disagreements.append(f"{key} {found[key][0]!r} (line {found[key][1]}) and {value!r} (line {number})")
            found[key] = (value, number)
    if unresolved:
        notes.append(f"launch options with shell variables skipped (unresolved): {', '.join(unresolved[:4])}")
    if disagreements:
        problems.append(f"the log's launch commands disagree on {'; '.join(disagreements[:3])}: the last was used")
    return {key: value for key, (value, _) in found.items()}, sorted({number for _, number in found.values()})


def attach_launch_options(parsed, path, lines: list) -> None:
    """Set `parsed.command_config` / `command_path` from the launch options in `lines` (see module docstring)."""
    options, numbers = read_launch_options(lines, parsed.style, parsed.problems, parsed.notes)
    if options:
        shown = ", ".join(str(n) for n in numbers[:3]) + (", ..." if len(numbers) > 3 else "")
        parsed.command_config = options
        parsed.command_path = f"{path} (launch command, line{'s' if len(numbers) > 1 else ''} {shown})"
