"""Distribution names (PEP 503) and the numeric part of version numbers."""

from __future__ import annotations

import re


def canonical_name(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def version_tuple(text: str) -> tuple[int, ...]:
    """``"2.10"`` -> ``(2, 10)``; non-numeric parts end the tuple."""
    out: list[int] = []
    for part in text.split("."):
        m = re.match(r"\d+", part)
        if not m:
            break
        out.append(int(m.group()))
    return tuple(out)
