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

Inside a held traceback, Python's own layout is put back where the toolkit split it: a frame's
source line gets its four-space indentation back, and the exception's type, ``":"`` and message
(three pieces) become one line again.

What cannot be rejoined: the toolkit prints every piece it reads as its own line, so outside
tracebacks a rank's line written in several pieces *and* read by the toolkit in several reads
stays split over lines (each whole, each prefixed), and whitespace at the edges of a piece is gone
(the toolkit strips it; carets under a traceback's source line lose their column). The raw log
keeps the exact bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Open MPI's tag (``[1,3]<stderr>:``) and the toolkit's rewrite of it (``[1,mpirank:3,algo-2]<stderr>:``).
TAG = re.compile(r"\[(\d+),(?:mpirank:)?(\d+)(?:,([A-Za-z0-9_.-]+))?\]<(stdout|stderr|stddiag)>:")
#: Seconds a traceback is held for its exception line before it is shown anyway (a rank writes
#: a traceback in many small pieces; on a loaded machine they can take a while).
TRACEBACK_HOLD = 5.0
#: A bare exception name (``RuntimeError``, ``torch.distributed.DistBackendError``): Python writes
#: the exception's type, ``": "`` and its message as three pieces.
_EXC_NAME = re.compile(r"^[A-Z_][\w]*(?:\.[A-Za-z_]\w*)*$|^(?:[a-z_]\w*\.)+[A-Z_]\w*$")
_CARETS = re.compile(r"^[\^~]+$")
_TRACEBACK = "Traceback (most recent call last):"
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")

Key = tuple[int, str]  # (rank, stream)


@dataclass
class _Rank:
    host: str
    partial: str = ""  # a fragment continued later on the same raw line
    after_content: bool = False  # the last thing shown for this rank was a non-empty line
    block: list[str] = field(default_factory=list)  # a traceback being held (texts, without prefix)
    block_since: float = 0.0
    exception: bool = False  # the block's last line is the exception's bare name: ": message" may follow


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
        if text.startswith(_TRACEBACK) and not state.block:
            state.block, state.block_since, state.exception = [text], now, False
            return []
        if not state.block:
            return [self._shown(key, text)]
        return self._in_traceback(key, state, text)

    def _shown(self, key: Key, text: str) -> str:
        return f"{self.prefix(key[0], key)} {text}".rstrip()

    def _emit(self, key: Key, state: _Rank) -> list[str]:
        block, state.block, state.exception = state.block, [], False
        return [self._shown(key, text) for text in block]

    def _in_traceback(self, key: Key, state: _Rank, text: str) -> list[str]:
        """One more line of a held traceback. Python writes a frame's source line (after its
        indentation) and the exception's type, ``": "`` and message as separate pieces, which the
        toolkit may print as separate lines: they are put back together (a source line gets
        Python's four-space indentation back; carets lose their column)."""
        last = state.block[-1]
        if state.exception:
            if text == ":" and not last.endswith(":"):
                state.block[-1] = last + ":"
                return []
            if last.endswith(":"):
                state.block[-1] = f"{last} {text.lstrip(': ')}"
                return self._emit(key, state)
            out = self._emit(key, state)  # an exception without a message; this line is not ours
            return out + self._line(key, state, text, state.block_since)
        if text and not text[0].isspace():
            if last.startswith('  File "') and not _EXC_NAME.match(text.split(":", 1)[0]):
                state.block.append("    " + text)  # the frame's source line
                return []
            if _CARETS.match(text) and last.startswith("    "):
                state.block.append("    " + text)
                return []
        state.block.append(text)
        if not text or text[0].isspace() or text.startswith((_TRACEBACK, *_CHAIN)):
            return []
        if _EXC_NAME.match(text) or text.endswith(":"):  # the type alone: ": message" may follow
            state.exception = True
            return []
        return self._emit(key, state)

    def flush(self, now: float, *, final: bool = False) -> list[str]:
        """Held tracebacks older than :data:`TRACEBACK_HOLD` (all of them when ``final``)."""
        out: list[str] = []
        for key, state in self.ranks.items():
            if final and state.partial:
                out += self._line(key, state, state.partial, now)
                state.partial = ""
            if state.block and (final or now - state.block_since >= TRACEBACK_HOLD):
                out += self._emit(key, state)
        return out
