"""Command-line values shared by the profilers."""

from __future__ import annotations

from batchscale.errors import UserError


def parse_positive_ints(text: str, option: str, example: str) -> list[int]:
    """'16,32,64' -> [16, 32, 64]: sorted, unique, every value an integer >= 1; else a UserError naming `option`."""
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UserError(option, f"not a comma list of integers: {text!r}", f"pass e.g. --{option} {example}") from None
    if not values or values[0] < 1:
        raise UserError(option, f"every value must be an integer >= 1, got {text!r}", f"pass e.g. --{option} {example}")
    return values
