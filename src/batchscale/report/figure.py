"""One figure of the report: its PNG, where it is now, its title and caption (figures.py and decision_figures.py draw
them; html.py inlines them, markdown.py links them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Figure:
    name: str  # file name in the output directory
    title: str
    caption: str
    path: Path  # where the PNG is now (final for reused analysis plots, temporary for drawn ones)
    drawn: bool  # True when this report drew it (so it is written into the output directory)
