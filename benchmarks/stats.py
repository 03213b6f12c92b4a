"""Small pure helpers: medians, ratios and the Markdown table (unit-tested, no timing)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any


def median(values: Sequence[float | None]) -> float | None:
    """Median of the values that are not ``None``; ``None`` when there are none."""
    present = [float(v) for v in values if v is not None]
    return statistics.median(present) if present else None


def ratio(value: float | None, baseline: float | None) -> float | None:
    """``value / baseline``, or ``None`` when either is missing or the baseline is zero."""
    if value is None or baseline is None or baseline == 0:
        return None
    return value / baseline


def summarise(reps: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> dict[str, float | None]:
    """Per key, the median over the repetitions (``None`` values are ignored)."""
    return {k: median([r.get(k) for r in reps]) for k in keys}


def fmt(value: float | None, unit: str = "", digits: int = 2) -> str:
    """``12.35 s``-style text; an em dash for a missing value."""
    if value is None:
        return "—"
    return f"{value:.{digits}f}{(' ' + unit) if unit else ''}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
