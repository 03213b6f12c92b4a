"""The first death is the headline: which rank died first in a ``Failed`` job, how, and where.

When one rank dies (a signal: SIGSEGV in a native extension, SIGABRT, SIGBUS …; or an exception)
the others usually fail after it — gloo's "Connection closed by peer"/"Connection reset by
peer", a collective's timeout, torchrun stopping them — and the host that exits first, whose
failure file becomes ``FailureReason``, is often one of those. This observer names the rank that
died *first*, across hosts, from what the emulator recorded the moment each rank died:

- a fatal signal: the in-host ``faulthandler`` file (``fatal-<host>-<pid>.txt``,
  ``_sm_emulator_exits``) holds ``Fatal Python error: <signal>`` and every thread's Python stack;
  its mtime is the time of death (the handler wrote it just before the process died);
- an exception that ended the process: the ``exit-`` record (``sys.excepthook``, a
  ``multiprocessing`` child's end) with its time, type, first line and traceback frames;
- otherwise (a rank killed by SIGKILL, one whose script enabled ``faulthandler`` itself):
  torchrun's own "Root Cause (first observed failure)" block in each host's log — rank, local
  rank, exit code (``-11`` for SIGSEGV), PID, time (whole seconds, the time torchrun *saw* the
  failure). It is also kept as an oracle (``RootCauses``).

Only rank processes count (``RANK``/``OMPI_COMM_WORLD_RANK``, or a process-group record): a
launcher failing because its child failed (torchrun's ``ChildFailedError``, the toolkit's
``ExecuteUserScriptError``) is a consequence. The earliest death is the first; every death after
it is secondary. A torchrun time is rounded down to its second, so within one second a death only
torchrun saw sorts before one the emulator timed.

What it reports (not emulated: SageMaker says none of this): ``Emulator.FirstDeath`` in
``job.json`` (host, rank, local rank, PID, signal or exception, exit code, time, innermost user
frame, stack innermost first, the later deaths with their delay, torchrun's root causes), the
whole faulthandler dump in ``<job dir>/first-death.txt``, and a headline in the console summary
and the pytest plugin's failure report (:func:`headline`). ``FailureReason`` stays the toolkit's
text, as SageMaker reports it, and nothing is written to the job's own output.

Not seen: non-Python processes; a process killed by SIGKILL without torchrun above it (MPI
ranks: ``mpirun`` prints no root cause); a plain job with no ranks.
"""

from __future__ import annotations

import ast
import math
import re
import signal as signals
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..inhost.protocol import CODE_DIR, FATAL_PREFIX
from ..job.request import host_order
from ..job.result import iso
from ..observers import AttemptRecords, FinishContext, Report
from . import quiet
from .stacks import Frame, _recorded_ranks, is_user_frame, parse_faulthandler

#: The key of the record in ``job.json``'s ``Emulator`` object.
FIELD = "FirstDeath"
#: The whole faulthandler dump (or exception stack) of the first death, in the job dir.
DUMP_FILE = "first-death.txt"
#: faulthandler's words for the signals it handles (CPython ``Modules/faulthandler.c``).
FATAL_SIGNALS = {"Segmentation fault": signals.SIGSEGV, "Aborted": signals.SIGABRT, "Bus error": signals.SIGBUS,
                 "Floating-point exception": signals.SIGFPE, "Illegal instruction": signals.SIGILL}
#: How many frames of the stack the console headline shows, and how many later deaths it names.
HEADLINE_FRAMES = 12
HEADLINE_LATER = 4
#: torchrun's title line of the block naming the first failure it observed on its host.
ROOT_CAUSE = "Root Cause (first observed failure):"
#: How far a torchrun time may lie outside the attempt and still be read in a time zone.
CLOCK_SLACK = 120.0

_HEADER = re.compile(r"^# sm-emulator-fatal pid=(\d+) rank=(\S+) local=(\S+) start=([\d.]+)(?: argv=(.*))?$")
_FATAL = re.compile(r"^Fatal Python error: (.+)$", re.M)
_FRAME_TEXT = re.compile(r"^(.*):(\d+) in (.+)$")
_FIELD_LINE = re.compile(r"\b(time|host|rank|exitcode|error_file|traceback)\s*: ?(.*)$")
_RANK = re.compile(r"^(\d+) \(local_rank: (\d+)\)")
_EXITCODE = re.compile(r"^(-?\d+) \(pid: (\d+)\)")
_LIBRARY_PREFIX = re.compile(r"^.*/(?:site-packages|dist-packages|lib/python\d+(?:\.\d+)?)/")


@dataclass(frozen=True)
class Death:
    """How one rank process died, as one source saw it."""

    host: str
    rank: int | None
    local_rank: int | None
    pid: int | None
    time: float | None  # wall clock; torchrun's is rounded down to the second
    source: str  # faulthandler | exception | torchrun
    signal: str | None = None  # SIGSEGV …
    exit_code: int | None = None  # as torchrun reports it: -N for signal N
    exception: str | None = None
    message: str | None = None
    frames: tuple[Frame, ...] = ()  # innermost first
    argv: tuple[str, ...] = ()
    dump: str = ""  # faulthandler's text (every thread), or the exception's frames

    @property
    def how(self) -> str:
        """``SIGSEGV``, ``RuntimeError: text``, or ``exit code N``."""
        if self.signal:
            return self.signal
        if self.exception:
            return f"{self.exception}: {self.message}" if self.message else self.exception
        return f"exit code {self.exit_code}" if self.exit_code is not None else "unknown"

    @property
    def where(self) -> str | None:
        """The innermost frame of the user's code (else the innermost frame), for people."""
        frame = next((f for f in self.frames if is_user_frame(f)), self.frames[0] if self.frames else None)
        return short(frame) if frame else None

    def who(self) -> str:
        """``algo-1 rank 0``."""
        return f"{self.host} rank {self.rank if self.rank is not None else '?'}"


def short(frame: Frame) -> str:
    """``train.py:12 in step`` for the job's code; ``ctypes/__init__.py:519 in string_at`` for a
    library (the path under ``site-packages`` or the standard library); else the file name."""
    path = frame.file
    if path.startswith(CODE_DIR + "/"):
        path = path[len(CODE_DIR) + 1:]
    elif _LIBRARY_PREFIX.match(path):
        path = _LIBRARY_PREFIX.sub("", path)
    else:
        path = path.rsplit("/", 1)[-1]
    return f"{path}:{frame.line} in {frame.function}"


# -- reading what the ranks left ---------------------------------------------------------------
def _int(value: object) -> int | None:
    """An integer from a record's field (``"3"``, ``-11``); None for ``-``, None or text."""
    text = str(value) if value is not None else ""
    return int(text) if text.lstrip("-").isdigit() else None


def load_fatal(diag_dir: Path, *, since: float = 0.0) -> list[Death]:
    """Processes a fatal signal ended (``fatal-`` files with a faulthandler dump), timed by mtime."""
    ranks = _recorded_ranks(diag_dir)
    out = []
    for path in diag_dir.glob(f"{FATAL_PREFIX}*.txt"):
        try:
            text = path.read_text(errors="replace")
            mtime = path.stat().st_mtime
        except OSError:
            continue
        header, _, dump = text.partition("\n")
        fatal, head = _FATAL.search(dump), _HEADER.match(header)
        if fatal is None or head is None or mtime < since:
            continue
        host = path.name[len(FATAL_PREFIX):-len(".txt")].rsplit("-", 1)[0]
        pid = int(head.group(1))
        rank = _int(head.group(2))
        try:
            argv = tuple(str(a) for a in ast.literal_eval(head.group(5) or "[]"))
        except (ValueError, SyntaxError):
            argv = ()
        threads = parse_faulthandler(dump)
        current = next((t for t in threads if t.current), threads[0] if threads else None)
        sig = FATAL_SIGNALS.get(fatal.group(1).strip())
        out.append(Death(host, rank if rank is not None else ranks.get((host, pid)), _int(head.group(3)), pid, mtime,
                         "faulthandler", signal=sig.name if sig else fatal.group(1).strip(),
                         exit_code=-sig.value if sig else None, frames=current.frames if current else (),
                         argv=argv, dump=dump.strip()))
    return out


def _frame(text: str) -> Frame | None:
    """A :class:`Frame` from an ``exit-`` record's ``file:line in function``."""
    m = _FRAME_TEXT.match(text)
    return Frame(m.group(1), int(m.group(2)), m.group(3)) if m else None


def load_exceptions(diag_dir: Path, *, since: float = 0.0) -> list[Death]:
    """Processes an exception ended (``exit-`` records of kind ``uncaught`` and ``child-exit``;
    a thread's death is not the process's), timed when the hook ran."""
    ranks = _recorded_ranks(diag_dir)
    out = []
    for data in quiet.load(diag_dir, since=since):  # the exit- records, less the launchers' consequences
        if data.get("kind") not in ("uncaught", "child-exit"):
            continue
        host, pid = str(data.get("host")), _int(data.get("pid"))
        rank = _int(data.get("rank"))
        stack = [f for f in (_frame(str(s)) for s in data.get("stack") or [data.get("where") or ""]) if f]
        code = _int(data.get("code")) if data.get("kind") == "child-exit" else 1  # Python's status for it
        text = "\n".join(f"  {f.file}:{f.line} in {f.function}" for f in stack)
        out.append(Death(host, rank if rank is not None else ranks.get((host, pid or 0)), _int(data.get("local_rank")),
                         pid, float(data["time"]), "exception", exit_code=code, exception=data.get("exception"),
                         message=data.get("message"), frames=tuple(stack),
                         argv=tuple(str(a) for a in data.get("argv") or []),
                         dump=f"{data.get('exception')}: {data.get('message') or ''}\n"
                              f"Traceback frames (most recent call first):\n{text}"))
    return out


def _epoch(stamp: str, *, since: float, now: float) -> float | None:
    """torchrun's ``YYYY-MM-DD_HH:MM:SS`` (the host's local time) as seconds since the epoch: read
    as this machine's local time, else as UTC (a container's zone), whichever falls in the attempt."""
    try:
        naive = datetime.strptime(stamp.strip(), "%Y-%m-%d_%H:%M:%S")
    except ValueError:
        return None
    readings = [naive.timestamp(), naive.replace(tzinfo=timezone.utc).timestamp()]
    if since <= 0:
        return readings[0]
    return next((t for t in readings if since - CLOCK_SLACK <= t <= now + CLOCK_SLACK), None)


def root_causes(text: str, host: str, *, since: float = 0.0, now: float | None = None) -> list[Death]:
    """The failures torchrun names under "Root Cause (first observed failure)" in a host's log (one
    per block; a block printed twice, by torchrun and in the toolkit's error, counts once)."""
    lines = text.splitlines()
    now = time.time() if now is None else now
    out: dict[tuple[int | None, int | None], Death] = {}
    for i, line in enumerate(lines):
        if ROOT_CAUSE not in line:
            continue
        fields: dict[str, str] = {}
        for following in lines[i + 1:i + 12]:
            m = _FIELD_LINE.search(following)
            if m and m.group(1) not in fields:
                fields[m.group(1)] = m.group(2).strip()
            if "traceback" in fields:
                break
        rank, code = _RANK.match(fields.get("rank", "")), _EXITCODE.match(fields.get("exitcode", ""))
        if rank is None or code is None:
            continue
        exit_code = int(code.group(1))
        try:
            sig = signals.Signals(-exit_code).name if exit_code < 0 else None
        except ValueError:
            sig = str(-exit_code)
        death = Death(host, int(rank.group(1)), int(rank.group(2)), int(code.group(2)),
                      _epoch(fields.get("time", ""), since=since, now=now), "torchrun", signal=sig,
                      exit_code=exit_code, message=fields.get("traceback"))
        out.setdefault((death.rank, death.pid), death)
    return list(out.values())


# -- deciding ------------------------------------------------------------------------------------
def order(deaths: Sequence[Death], roots: Sequence[Death] = ()) -> list[Death]:
    """Every rank's death, earliest first (module docstring): the emulator's records, one per process
    (its earliest), completed by torchrun's root causes (the exit code torchrun saw; a rank only
    torchrun saw is added). Deaths without a time come last, signals before exit codes."""
    earliest: dict[tuple[str, int | None], Death] = {}
    for d in sorted((d for d in deaths if d.rank is not None), key=lambda d: d.time or 0.0):
        earliest.setdefault((d.host, d.pid), d)
    found = list(earliest.values())
    for root in roots:
        i = next((i for i, d in enumerate(found) if (d.host, d.rank) == (root.host, root.rank)), None)
        if i is None:
            found.append(root)
        elif root.exit_code is not None:
            found[i] = replace(found[i], exit_code=root.exit_code,
                               local_rank=found[i].local_rank if found[i].local_rank is not None else root.local_rank)
    return sorted(found, key=lambda d: (d.time if d.time is not None else math.inf, d.signal is None,
                                        host_order(d.host), d.rank if d.rank is not None else -1))


def decide(deaths: Sequence[Death], roots: Sequence[Death] = ()) -> tuple[Death, list[Death]] | None:
    """The first death and the secondary ones (those timed after it); None when no rank died."""
    ranked = order(deaths, roots)
    if not ranked:
        return None
    first = ranked[0]
    later = [d for d in ranked[1:] if first.time is not None and d.time is not None and d.time > first.time]
    return first, later


# -- reporting ------------------------------------------------------------------------------------
def _iso(t: float | None) -> str | None:
    """``job.json``'s time format, or None."""
    return None if t is None else iso(t)


def describe(first: Death, later: Sequence[Death], roots: Sequence[Death], dump_file: Path | None) -> dict[str, Any]:
    """``Emulator.FirstDeath``."""
    record: dict[str, Any] = {
        "Host": first.host, "Rank": first.rank, "LocalRank": first.local_rank, "Pid": first.pid,
        "Signal": first.signal, "ExitCode": first.exit_code, "Exception": first.exception, "Message": first.message,
        "Time": _iso(first.time), "Source": first.source, "Where": first.where,
        "Stack": [short(f) for f in first.frames], "DumpFile": str(dump_file) if dump_file else None,
        "Secondary": [{"Host": d.host, "Rank": d.rank, "Pid": d.pid, "Signal": d.signal, "ExitCode": d.exit_code,
                       "Exception": d.exception, "Message": d.message, "Time": _iso(d.time), "Source": d.source,
                       "Where": d.where, "AfterSeconds": round((d.time or 0.0) - (first.time or 0.0), 3)}
                      for d in later],
        "RootCauses": [{"Host": r.host, "Rank": r.rank, "LocalRank": r.local_rank, "Pid": r.pid,
                        "ExitCode": r.exit_code, "Signal": r.signal, "Time": _iso(r.time)} for r in roots],
    }  # fmt: skip
    record["Headline"] = headline(record)[0]
    return record


#: How much of a secondary death's exception text the headline shows (gloo's run long).
SECONDARY_TEXT = 100


def _how(record: Mapping[str, Any]) -> str:
    """``died of SIGSEGV`` / ``died of an uncaught RuntimeError: text`` for a ``FirstDeath`` record."""
    if record.get("Signal"):
        return f"died of {record['Signal']}"
    if record.get("Exception"):
        message = f": {record['Message']}" if record.get("Message") else ""
        return f"died of an uncaught {record['Exception']}{message}"
    return "died"


def _what(record: Mapping[str, Any]) -> str:
    """A secondary death in a few words: ``SIGABRT``, ``RuntimeError: <start of its text>``, ``exit code 1``."""
    if record.get("Signal"):
        return str(record["Signal"])
    if record.get("Exception"):
        # gloo's texts start with its source position and end with advice: the first sentence says it
        message = re.sub(r"^\[[^\]]*\]\s*", "", str(record.get("Message") or "")).split(". ")[0]
        text = f"{record['Exception']}: {message}".rstrip(": ")
        return text if len(text) <= SECONDARY_TEXT else text[:SECONDARY_TEXT - 1] + "…"
    return f"exit code {record.get('ExitCode')}"


def headline(record: Mapping[str, Any]) -> list[str]:
    """The console lines for ``Emulator.FirstDeath`` (the first one is ``Headline``)."""
    rank = record.get("Rank")
    extra = ", ".join(x for x in (f"local rank {record['LocalRank']}" if record.get("LocalRank") is not None else "",
                                  f"pid {record['Pid']}" if record.get("Pid") is not None else "") if x)
    code = f" (exit code {record['ExitCode']})" if record.get("ExitCode") is not None else ""
    at = f" at {record['Time']}" if record.get("Time") else ""
    later = record.get("Secondary") or []
    before = f", before {len(later)} later failure{'s' if len(later) != 1 else ''}" if later else ""
    where = f", in {record['Where']}" if record.get("Where") else ""
    lines = [f"first death: {record.get('Host')} rank {rank if rank is not None else '?'}"
             f"{f' ({extra})' if extra else ''} {_how(record)}{code}{at}{where}{before}"]
    stack = list(record.get("Stack") or [])
    if stack:
        lines.append("  its Python stack, most recent call first:")
        lines += [f"    {frame}" for frame in stack[:HEADLINE_FRAMES]]
        if len(stack) > HEADLINE_FRAMES:
            lines.append(f"    … {len(stack) - HEADLINE_FRAMES} more")
    elif record.get("Source") == "torchrun":
        lines.append("  (from torchrun's Root Cause block: the emulator recorded no Python stack for it)")
    if record.get("DumpFile"):
        lines.append(f"  {'every thread' if record.get('Source') == 'faulthandler' else 'kept'}: {record['DumpFile']}")
    if later:
        named = "; ".join(f"{d['Host']} rank {d['Rank']} (+{d['AfterSeconds']:g} s): {_what(d)}"
                          for d in later[:HEADLINE_LATER])
        more = f"; and {len(later) - HEADLINE_LATER} more" if len(later) > HEADLINE_LATER else ""
        lines.append(f"  secondary (after it): {named}{more}")
    return lines


def find(diag_dir: Path, logs: Mapping[str, Path], *, since: float = 0.0,
         now: float | None = None) -> tuple[Death, list[Death], list[Death]] | None:
    """(first death, secondary deaths, torchrun's root causes) of a job, or None."""
    roots = []
    for host in sorted(logs, key=host_order):
        try:
            text = logs[host].read_text(errors="replace")
        except OSError:
            continue
        roots += root_causes(text, host, since=since, now=now)
    decided = decide([*load_fatal(diag_dir, since=since), *load_exceptions(diag_dir, since=since)], roots)
    return None if decided is None else (*decided, roots)


class FirstDeath(AttemptRecords):
    """Names the first rank to die in a ``Failed`` job (see the module docstring)."""

    def report(self, finish: FinishContext) -> Report:
        """``Emulator.FirstDeath`` and ``first-death.txt`` for a ``Failed`` job where a rank died."""
        if finish.status != "Failed" or not finish.diag_dir.is_dir():
            return Report()
        found = find(finish.diag_dir, {h.name: h.log for h in finish.hosts}, since=self.since)
        if found is None:
            return Report()
        first, later, roots = found
        dump_file = finish.job_dir / DUMP_FILE if first.dump else None
        if dump_file is not None:
            header = (f"# first death: {first.who()} (pid {first.pid}, `{' '.join(first.argv)}`), "
                      f"{first.how}, at {_iso(first.time)} ({first.source})\n")
            dump_file.write_text(header + first.dump + "\n")
        return Report(emulator={FIELD: describe(first, later, roots, dump_file)})


__all__ = ["DUMP_FILE", "FIELD", "Death", "FirstDeath", "decide", "describe", "find", "headline", "load_exceptions",
           "load_fatal", "order", "root_causes"]
