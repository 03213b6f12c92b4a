"""Console output for people: per-host live logs with an ``[algo-N]`` prefix, and tables.

Host output goes to files (``<job dir>/logs/algo-N.log``); :class:`LogTailer` follows them from
one thread and prints complete lines. Colour only when the stream is a terminal.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

_COLOURS = ("36", "35", "33", "32", "34", "31")
#: How often the tailer looks for new output.
TAIL_INTERVAL = 0.1


def use_colour(stream: TextIO) -> bool:
    return hasattr(stream, "isatty") and stream.isatty() and os.environ.get("NO_COLOR") is None


def paint(text: str, code: str, stream: TextIO) -> str:
    return f"\033[{code}m{text}\033[0m" if use_colour(stream) else text


class LogTailer:
    """Follow host log files and hand each complete line to ``sink`` as ``[algo-N] line``."""

    def __init__(self, files: dict[str, Path], *, stream: TextIO | None = None,
                 sink: Callable[[str, str], None] | None = None, echo: bool = True) -> None:
        self.files = files
        self.stream = stream or sys.stdout
        self.sink = sink
        self.echo = echo
        self._offsets = dict.fromkeys(files, 0)
        self._partial = dict.fromkeys(files, b"")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="emulator-log-tailer")
        width = max((len(h) for h in files), default=6)
        self._prefix = {h: paint(f"[{h}]".ljust(width + 2), _COLOURS[i % len(_COLOURS)], self.stream)
                        for i, h in enumerate(files)}

    def start(self) -> LogTailer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.poll(final=True)

    def _run(self) -> None:
        while not self._stop.wait(TAIL_INTERVAL):
            self.poll()

    def poll(self, final: bool = False) -> None:
        for host, path in self.files.items():
            try:
                with open(path, "rb") as f:
                    f.seek(self._offsets[host])
                    data = f.read()
            except FileNotFoundError:
                continue
            if not data and not (final and self._partial[host]):
                continue
            self._offsets[host] += len(data)
            data = self._partial[host] + data
            lines = data.split(b"\n")
            self._partial[host] = b"" if final else lines.pop()
            for raw in lines:
                if final and not raw:
                    continue
                line = raw.decode("utf-8", errors="replace").rstrip("\r")
                if self.sink is not None:
                    self.sink(host, line)
                if self.echo:
                    self.stream.write(f"{self._prefix[host]} {line}\n")
            if self.echo:
                self.stream.flush()


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain aligned text table."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    out = ["  ".join(c.ljust(w) for c, w in zip(cells[0], widths)).rstrip(),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells[1:]]
    return "\n".join(out)


def tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file ('' if it does not exist)."""
    try:
        data = path.read_bytes()[-65536:]
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", errors="replace").splitlines()[-lines:])
