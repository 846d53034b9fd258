"""The config's ranges and text rules: past these a value is no longer useful, only a crash or an allocation waiting to
happen (issue 30), so config.py refuses it with its range before anything runs.

- integers: seeds 0..2**32-1 (every generator batchscale seeds takes them), counts per step up to 2**31-1 (int32
  tensor sizes), cumulative samples up to 2**53 (exact JSON numbers), threads up to 1024, new tokens up to 65536
  (and the model's context: train.state checks it once the model is loaded);
- sampling.temperature at least 0.01: below it logits / T overflow and sampling returns garbage;
- a numeric lr rule is an exponent in [0, 1];
- run.label holds no control character and does not start with '.';
- task.template names only {a}, {op} and {b}: text, never a format-string expression.
"""

from __future__ import annotations

import string

from batchscale.errors import UserError

SEED_MAX = 2**32 - 1
COUNT_MAX = 2**31 - 1  # prompts, responses and sequences per step: int32 tensor sizes and indices
SAMPLES_MAX = 2**53  # cumulative samples are JSON numbers: exact integers up to 2**53
MAX_NEW_TOKENS_MAX = 65536  # and at most the model's context (train.state checks it once the model is loaded)
THREADS_MAX = 1024
TEMPERATURE_MIN = 0.01  # below it logits / T overflow to inf and sampling returns garbage


def check_label_text(label: str | None) -> None:
    """A label names directories and appears in reports: no control character (a NUL above all), no leading '.'
    (a hidden run directory, which analysis skips)."""
    if label is None:
        return
    if any(not c.isprintable() for c in label):
        bad = next(c for c in label if not c.isprintable())
        raise UserError("run.label", f"{label!r} holds the control character {bad!r}",
                        "choose a label of letters, digits, '-' and '_'")
    if label.startswith(".") or not label.strip():
        raise UserError("run.label", f"{label!r} must not be blank or start with '.' (its run directory would be "
                        "hidden, and analysis skips hidden directories)", "choose a label starting with a letter or digit")


def check_lr_exponents(rules: dict[str, object]) -> None:
    """A numeric lr rule (field -> value) is the exponent a of lr ~ B^a: 0 (none) to 1 (linear)."""
    for field, rule in rules.items():
        if isinstance(rule, float) and not 0 <= rule <= 1:
            raise UserError(field, f"the exponent a of lr ~ B^a must be in [0, 1], got {rule}",
                            "use 0.5 (sqrt), 1 (linear), 0 (none) or an exponent between them")


TEMPLATE_FIELDS = ("a", "op", "b")


def check_template(template: str) -> None:
    """task.template names only {a}, {op} and {b} (no attribute, index or format spec: the template is text, never
    code), and its braces are balanced."""
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(template) if name is not None]
    except ValueError as e:
        raise UserError("task.template", f"{template!r} is not a valid template ({e})",
                        "write '{{' and '}}' for literal braces, e.g. '{a}{op}{b}='") from None
    for name, spec, conv in fields:
        if name not in TEMPLATE_FIELDS or spec or conv:
            raise UserError("task.template", f"{template!r} holds the placeholder {{{name}}}{' with a format' if spec or conv else ''}; "
                            f"only {', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)} are filled in",
                            "use {a}, {op} and {b} only, e.g. '{a}{op}{b}='")
