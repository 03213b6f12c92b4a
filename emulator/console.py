"""Console output for people: per-host live logs with an ``[algo-N]`` prefix, and tables.

Host output goes to files (the backend writes ``<job dir>/logs/algo-N.raw.log``, the exact bytes);
:class:`LogTailer` follows them from one thread, rejoins MPI ranks' tagged fragments into whole
lines prefixed ``[algo-N rank R]`` (:mod:`emulator.mpi_output`), writes the result to
``logs/algo-N.log`` and prints it, each line prefixed with its host (a rank's line with its
``[algo-N rank R]``). Colour only when the stream is a terminal.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO, TextIO

from .mpi_output import Rejoiner

_COLOURS = ("36", "35", "33", "32", "34", "31")
#: How often the tailer looks for new output.
TAIL_INTERVAL = 0.1
#: A rank's line as :class:`~emulator.mpi_output.Rejoiner` shows it.
RANK_LINE = re.compile(r"^\[(algo-\d+) rank \d+\] ")
RAW_SUFFIX = ".raw.log"


def raw_log(log: Path) -> Path:
    """The raw log (the host's exact output) beside a host's display log ``logs/algo-N.log``."""
    return log.with_name(log.name[: -len(".log")] + RAW_SUFFIX) if log.name.endswith(".log") else log


def host_output(log: Path) -> Path:
    """What a host wrote, exactly (MPI tags intact): its raw log where there is one, else ``log``."""
    raw = raw_log(log)
    return raw if raw.exists() else log


def display_log(raw: Path) -> Path:
    """The display log ``logs/algo-N.log`` beside a host's raw log ``logs/algo-N.raw.log``."""
    return raw.with_name(raw.name[: -len(RAW_SUFFIX)] + ".log") if raw.name.endswith(RAW_SUFFIX) else raw


def use_colour(stream: TextIO) -> bool:
    return hasattr(stream, "isatty") and stream.isatty() and os.environ.get("NO_COLOR") is None


def paint(text: str, code: str, stream: TextIO) -> str:
    return f"\033[{code}m{text}\033[0m" if use_colour(stream) else text


class LogTailer:
    """Follow host log files; hand each complete raw line to ``sink(host, line)``; rejoin MPI
    ranks' fragments; print the result as ``[algo-N] line`` (``echo``) and append it to
    ``out[host]`` (the display logs) when given."""

    def __init__(self, files: dict[str, Path], *, stream: TextIO | None = None,
                 sink: Callable[[str, str], None] | None = None, echo: bool = True,
                 out: dict[str, Path] | None = None) -> None:
        self.files = files
        self.stream = stream or sys.stdout
        self.sink = sink
        self.echo = echo
        self.out = out or {}
        self._outputs: dict[str, BinaryIO] = {}
        self._offsets = dict.fromkeys(files, 0)
        self._partial = dict.fromkeys(files, b"")
        self._rejoin = {h: Rejoiner(h) for h in files}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="emulator-log-tailer")
        width = max((len(h) for h in files), default=6)
        self._colour = {h: _COLOURS[i % len(_COLOURS)] for i, h in enumerate(files)}
        self._prefix = {h: paint(f"[{h}]".ljust(width + 2), self._colour[h], self.stream) for h in files}

    def start(self) -> LogTailer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.poll(final=True)
        for f in self._outputs.values():
            f.close()
        self._outputs.clear()

    def _show(self, host: str, lines: Sequence[str]) -> None:
        if not lines:
            return
        if host in self.out:
            if host not in self._outputs:
                self._outputs[host] = open(self.out[host], "ab")  # noqa: SIM115 (closed in stop)
            self._outputs[host].write("".join(line + "\n" for line in lines).encode("utf-8", errors="replace"))
            self._outputs[host].flush()
        if self.echo:
            for line in lines:
                rank = RANK_LINE.match(line)
                if rank is None:
                    self.stream.write(f"{self._prefix[host]} {line}\n")
                else:
                    colour = self._colour.get(rank.group(1), self._colour[host])
                    self.stream.write(f"{paint(rank.group(0).rstrip(), colour, self.stream)} {line[rank.end():]}\n")

    def _run(self) -> None:
        while not self._stop.wait(TAIL_INTERVAL):
            self.poll()

    def poll(self, final: bool = False) -> None:
        now = time.monotonic()
        for host, path in self.files.items():
            rejoin = self._rejoin[host]
            try:
                with open(path, "rb") as f:
                    f.seek(self._offsets[host])
                    data = f.read()
            except FileNotFoundError:
                continue
            shown: list[str] = []
            if data or (final and self._partial[host]):
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
                    shown += rejoin.feed(line, now)
            shown += rejoin.flush(now, final=final)
            self._show(host, shown)
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
