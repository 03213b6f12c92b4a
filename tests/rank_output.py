"""Reading what a rank printed out of a stream it shares.

The ranks of a host share its stdout (and mpirun forwards every rank's output to algo-1), the
toolkit re-prints what it reads in chunks, and ``print`` under ``PYTHONUNBUFFERED=1`` writes the
text and the newline apart: one rank's text may follow another's before either newline
(``WARM rank 2 of 4 on algo-2WARM rank 3 of 4 on algo-2``), or get a newline of its own. So a test
never decides on a rank's output line by line (``line.startswith(MARKER)``, "the rest of the line
is JSON"): it matches over the whole text, with patterns that do not depend on line boundaries, or
reads a file the rank wrote alone (``SM_MODEL_DIR``, ``SM_OUTPUT_DATA_DIR``).
"""

from __future__ import annotations

import json
import re
from typing import Any


def marked_json(text: str, marker: str) -> list[Any]:
    """Every JSON value printed right after ``marker``, wherever ``marker`` is in ``text`` (glued to
    what came before it, or with text glued after the value): in order. A ``marker`` not followed
    by JSON raises :class:`json.JSONDecodeError` (what follows it is in the message)."""
    decoder = json.JSONDecoder()
    out = []
    for found in re.finditer(re.escape(marker), text):
        try:
            value, _ = decoder.raw_decode(text, found.end())
        except json.JSONDecodeError as exc:
            raise json.JSONDecodeError(f"{marker!r} is not followed by JSON: {text[found.end():found.end() + 200]!r}",
                                       exc.doc, exc.pos) from None
        out.append(value)
    return out
