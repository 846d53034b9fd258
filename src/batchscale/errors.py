"""User-facing errors: one line naming the field, the rule it broke and the fix.

Raised before any compute; the CLI prints the message (no traceback) and exits with code 2. A UserError survives
pickling (a sweep worker's error reaches the sweep whole), and its message is always one line: newlines inside a
quoted value or an exception's text are folded into spaces.
"""

from __future__ import annotations

import re

_LINE_BREAKS = re.compile(r"\s*[\r\n]+\s*")


class UserError(Exception):
    """Bad input from the user. `field` names what is wrong, `rule` what it must satisfy, `fix` what to do."""

    exit_code = 2

    def __init__(self, field: str, rule: str, fix: str):
        self.field, self.rule, self.fix = field, rule, fix
        super().__init__(_LINE_BREAKS.sub(" ", f"{field}: {rule}. Fix: {fix}"))

    def __reduce__(self):
        return type(self), (self.field, self.rule, self.fix)


class DataWarning(UserWarning):
    """Something the user should know about the input or a result, but that does not stop the command (a dropped
    truncated line, a censored seed, a target outside the scores). The CLI prints each as one `warning:` line, and
    `analyze` lists them in its report."""


class SparseEvalWarning(DataWarning):
    """A seed's crossing read between evals more than analysis.targets.WIDE_BRACKET_FRACTION of its N* apart. A class
    of its own so that a caller that chose the eval spacing deliberately (the demo) can say why in its own words
    rather than warn about its own choice; every filter on DataWarning still catches it."""
