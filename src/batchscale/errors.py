"""User-facing errors: one line naming the field, the rule it broke and the fix.

Raised before any compute; the CLI prints the message (no traceback) and exits with code 2.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user. `field` names what is wrong, `rule` what it must satisfy, `fix` what to do."""

    exit_code = 2

    def __init__(self, field: str, rule: str, fix: str):
        self.field, self.rule, self.fix = field, rule, fix
        super().__init__(f"{field}: {rule}. Fix: {fix}")


class DataWarning(UserWarning):
    """Something the user should know about the input or a result, but that does not stop the command (a dropped
    truncated line, a censored seed, a target outside the scores). The CLI prints each as one `warning:` line, and
    `analyze` lists them in its report."""
