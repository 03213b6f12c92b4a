"""Progress of a long phase whose work another process does into a log: pip making a job's
environment (its framework layers, once per machine, then the job's ``requirements.txt``).

While the phase runs, a watcher reads the log pip writes (``logs/jobenv.log``) and says how far it
is: packages collected, megabytes downloaded, packages being installed, seconds so far. On a
terminal it is one live line, rewritten each second; elsewhere (CI logs, a pipe) a line every
:data:`INTERVAL` seconds, the first naming the log. A phase that ends before the first line (a
cached environment) prints nothing. Lines start with :data:`PREFIX`, so a caller that hides a
job's output (``nox -s emulate``'s table) can still pass them on.

Read from pip's own log lines (pip 26: ``Collecting``, ``Downloading <file> (<size>)``, ``Installing
collected packages: ...``, ``Successfully installed``); a line pip does not write counts nothing.
"""

from __future__ import annotations

import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from .console import paint

#: Seconds between progress lines where the output is not a terminal (CI logs).
INTERVAL = 10.0
#: Seconds between rewrites of the live line on a terminal, and before the first one.
LIVE_INTERVAL = 1.0
#: How every progress line starts.
PREFIX = "[emulator] progress: "

_DOWNLOAD = re.compile(r"^\s*Downloading \S+ \(([\d.]+) (bytes|kB|MB|GB)\)")
_UNITS = {"bytes": 1e-6, "kB": 1e-3, "MB": 1.0, "GB": 1e3}


@dataclass
class PipProgress:
    """How far pip's log says it is."""

    collected: int = 0
    downloaded_mb: float = 0.0
    installing: int | None = None
    installed: int = 0

    def feed(self, line: str) -> None:
        text = line.strip()
        if text.startswith("Collecting "):
            self.collected += 1
        elif (size := _DOWNLOAD.match(line)) is not None:
            self.downloaded_mb += float(size.group(1)) * _UNITS[size.group(2)]
        elif text.startswith("Installing collected packages:"):
            self.installing = len([n for n in text.split(":", 1)[1].split(",") if n.strip()])
        elif text.startswith("Successfully installed "):
            self.installed += len(text.split()) - 2
            self.installing = None

    def describe(self) -> str:
        parts = [f"{self.collected} package(s) collected"]
        if self.downloaded_mb:
            parts.append(f"{self.downloaded_mb:,.0f} MB downloaded")
        if self.installing is not None:
            parts.append(f"installing {self.installing}")
        elif self.installed:
            parts.append(f"{self.installed} installed")
        return ", ".join(parts)


@contextmanager
def watch_pip_log(log: Path, what: str, stream: TextIO, *, clock: Callable[[], float] = time.monotonic,
                  interval: float | None = None) -> Iterator[None]:
    """Say how far pip is with ``what`` (e.g. "making the job's environment") while the block runs,
    from what it appends to ``log``; nothing when the block ends before the first line is due."""
    live = stream.isatty() if interval is None else False
    every = LIVE_INTERVAL if live else (INTERVAL if interval is None else interval)
    start = log.stat().st_size if log.exists() else 0
    done = threading.Event()
    began = clock()
    progress = PipProgress()
    said = False

    def read() -> None:
        nonlocal start
        if not log.exists():
            return
        with open(log, "rb") as f:
            f.seek(start)
            chunk = f.read()
        complete = chunk[:chunk.rfind(b"\n") + 1]
        start += len(complete)
        for line in complete.decode(errors="replace").splitlines():
            progress.feed(line)

    def watch() -> None:
        nonlocal said
        while not done.wait(every):
            read()
            text = f"{PREFIX}{what} ({clock() - began:.0f} s): {progress.describe()}"
            if live:  # one line, cut to the terminal's width so that \r rewrites it
                width = shutil.get_terminal_size().columns - 1
                stream.write("\r\033[K" + paint(text[:width], "1", stream))
            else:
                if not said:  # where the detail is, once
                    text += f"; pip's output: {log}"
                stream.write(paint(text, "1", stream) + "\n")
            stream.flush()
            said = True

    thread = threading.Thread(target=watch, name="pip-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if said and live:
            stream.write("\n")
            stream.flush()
