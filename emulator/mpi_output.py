"""Rejoined MPI output: each rank's lines whole, with an ``[algo-N rank R]`` prefix.

Under ``mpirun --tag-output`` Open MPI prefixes every chunk a rank writes with a tag
(``[1,3]<stderr>:``) — a chunk, not a line: a rank that writes ``"    "``, ``"main()"`` and
``"\\n"`` separately (Python does, unbuffered, for every traceback source line and every
``print``) yields three tags, and chunks of other ranks can come in between. The SageMaker
toolkit then reads mpirun's output in pieces, strips each piece and prints it as lines, rewriting
the tags to ``[1,mpirank:3,algo-2]<stderr>:``. So in a host's raw log a rank's line can arrive as
several tagged fragments, on one line (``[1,1]<stderr>:Trace[1,1]<stderr>:back``) or on several.

:class:`Rejoiner` turns one host's raw log lines into display lines:

- untagged lines (the toolkit's, sshd's, mpirun's own) pass unchanged;
- tagged fragments of one rank and stream on one raw line are joined (nothing came in between,
  so they are one line); a fragment followed by another rank's tag is unfinished (no newline came)
  and is continued by that rank's next fragment; the end of a raw line ends the last rank's line;
- a fragment that is empty after the toolkit's strip and follows that rank's previous line is the
  newline (or indentation) the rank wrote separately: it is dropped, not shown as a blank line;
- a Python traceback (``Traceback (most recent call last):`` up to its exception line) is held
  and emitted in one piece, so tracebacks of ranks that fail together do not interleave (a block
  not finished within :data:`TRACEBACK_HOLD` seconds is emitted as it is);
- each rank line is shown as ``[algo-N rank R] text``, ``algo-N`` being the rank's host as the
  tag names it (the toolkit's rewrite), else the host whose log it is.

What cannot be rejoined: the toolkit prints every piece it reads as its own line, so a rank's line
written in several pieces *and* read by the toolkit in several reads stays split over lines
(each whole, each prefixed), and whitespace at the edges of a piece is gone (the toolkit strips
it; e.g. a traceback's source lines lose their indentation). The raw log keeps the exact bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Open MPI's tag (``[1,3]<stderr>:``) and the toolkit's rewrite of it (``[1,mpirank:3,algo-2]<stderr>:``).
TAG = re.compile(r"\[(\d+),(?:mpirank:)?(\d+)(?:,([A-Za-z0-9_.-]+))?\]<(stdout|stderr|stddiag)>:")
#: Seconds a traceback is held for its exception line before it is shown anyway.
TRACEBACK_HOLD = 1.0
_TRACEBACK = "Traceback (most recent call last):"
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")

Key = tuple[int, str]  # (rank, stream)


@dataclass
class _Rank:
    host: str
    partial: str = ""  # a fragment continued later on the same raw line
    after_content: bool = False  # the last thing shown for this rank was a non-empty line
    block: list[str] = field(default_factory=list)  # a traceback being held
    block_since: float = 0.0


class Rejoiner:
    """Rejoins the tagged MPI output of one host's log (see the module docstring)."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.ranks: dict[Key, _Rank] = {}

    def prefix(self, rank: int, key: Key) -> str:
        return f"[{self.ranks[key].host} rank {rank}]"

    def feed(self, line: str, now: float) -> list[str]:
        """Display lines for one raw line (``now``: any monotonic clock, for the traceback hold)."""
        tags = list(TAG.finditer(line))
        if not tags:
            return [line]
        out: list[str] = []
        head = line[:tags[0].start()]
        if head.strip():
            out.append(head)
        pieces: list[tuple[Key, str, str | None]] = []
        for i, m in enumerate(tags):
            end = tags[i + 1].start() if i + 1 < len(tags) else len(line)
            key = (int(m.group(2)), m.group(4))
            if pieces and pieces[-1][0] == key:  # fragments of one rank back to back: one line
                pieces[-1] = (key, pieces[-1][1] + line[m.end():end], m.group(3))
            else:
                pieces.append((key, line[m.end():end], m.group(3)))
        for i, (key, text, host) in enumerate(pieces):
            state = self.ranks.setdefault(key, _Rank(host or self.host))
            if host:
                state.host = host
            if i + 1 < len(pieces):  # another rank's tag follows with no newline: a fragment, continued later
                state.partial += text
                continue
            out += self._line(key, state, state.partial + text, now)  # the raw line's end: the line's end
            state.partial = ""
        return out

    def _line(self, key: Key, state: _Rank, text: str, now: float) -> list[str]:
        text = text.rstrip("\r")
        if not text.strip():
            if state.after_content:  # the newline (or indentation) written on its own
                state.after_content = False
                return []
            text = ""
        else:
            state.after_content = True
        shown = f"{self.prefix(key[0], key)} {text}".rstrip()
        if text.startswith(_TRACEBACK) and not state.block:
            state.block, state.block_since = [shown], now
            return []
        if state.block:
            state.block.append(shown)
            ended = text and not text[0].isspace() and not text.startswith((_TRACEBACK, *_CHAIN))
            if ended:
                block, state.block = state.block, []
                return block
            return []
        return [shown]

    def flush(self, now: float, *, final: bool = False) -> list[str]:
        """Held tracebacks older than :data:`TRACEBACK_HOLD` (all of them when ``final``)."""
        out: list[str] = []
        for key, state in self.ranks.items():
            if final and state.partial:
                out += self._line(key, state, state.partial, now)
                state.partial = ""
            if state.block and (final or now - state.block_since >= TRACEBACK_HOLD):
                out += state.block
                state.block = []
        return out
