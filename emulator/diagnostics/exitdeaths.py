"""Deaths at interpreter exit: processes that ran their script to the end and then died.

The in-host code (``_sm_emulator_exits.mark_ended``) writes ``ended-<host>-<pid>.txt`` when a
process's main script has ended (its last line, ``sys.exit`` or an uncaught exception, and its
non-daemon threads). ``faulthandler`` writes to the process's whole-life ``fatal-<host>-<pid>.txt``
(or, where that could not be set, to the ``ended-`` file, pointed at from then on). A fatal signal
during interpreter exit (``atexit`` handlers, finalisation: gloo's teardown aborting with
"terminate called without an active exception", an ``os.abort()`` in an ``atexit`` handler) leaves
``Fatal Python error: <signal>`` and the threads' Python stacks there; a process that has an
``ended-`` mark and such a dump died after its script's last line.

For a ``Failed`` job, this observer names those processes per host — rank, PID, command, the
signal, the innermost Python frame of the thread that died (none for a C++ thread, e.g. a gloo
worker) and how often the host log says "terminate called without an active exception" — in a
diagnostic (``kind="died-at-exit"``: ``JobResult.diagnostics``, ``Emulator.Diagnostics`` and the
job's summary, below ``FailureReason``). ``FailureReason`` itself stays what SageMaker reports (the
toolkit's failure file, often a bare ``ExecuteUserScriptError``): SageMaker does not say this.

Not seen: a process that enabled ``faulthandler`` itself (its dump goes to its own file), a
process killed by SIGKILL at exit (no handler runs), non-Python processes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..inhost.protocol import ENDED_PREFIX, FATAL_PREFIX
from ..job.request import host_order
from ..job.result import Diagnostic
from ..observers import AttemptRecords, FinishContext, Report
from .stacks import by_host, display_path

KIND = "died-at-exit"
#: libstdc++'s text when ``std::terminate`` runs with no exception (a joinable ``std::thread``
#: destroyed, a forced unwind through a ``noexcept`` destructor).
TERMINATE = "terminate called without an active exception"
_FATAL = re.compile(r"^Fatal Python error: (.+)$", re.M)
_CURRENT = re.compile(r"^Current thread 0x[0-9a-f]+ \(most recent call first\):\n((?:  .*\n?)*)", re.M)
_FRAME = re.compile(r'File "(.+)", line (\d+) in (\S+)')
_FATAL_START = re.compile(r"^# sm-emulator-fatal pid=\d+ .*?start=([\d.]+)")


def _whole_life_dump(path: Path, ended: float) -> str:
    """The dump in the ``fatal-`` file of the process that wrote ``ended-`` file ``path``: '' when
    there is none, or when that file belongs to a later process with the same PID (it started after
    this one's script had ended)."""
    try:
        header, _, dump = (path.parent / (FATAL_PREFIX + path.name[len(ENDED_PREFIX):])).read_text(
            errors="replace").partition("\n")
    except OSError:
        return ""
    start = _FATAL_START.match(header)
    return dump if start is not None and float(start.group(1)) <= ended else ""


def load(diag_dir: Path, *, since: float = 0.0) -> list[dict[str, Any]]:
    """Processes that died of a fatal signal after their script ended: header + ``fatal`` + ``where``."""
    out = []
    for path in diag_dir.glob(f"{ENDED_PREFIX}*.txt"):
        try:
            header, _, dump = path.read_text(errors="replace").partition("\n")
            data = json.loads(header)
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or float(data.get("time", 0)) < since:
            continue
        fatal = _FATAL.search(dump)
        if fatal is None:
            dump = _whole_life_dump(path, float(data.get("time", 0)))
            fatal = _FATAL.search(dump)
        if fatal is None:
            continue
        data["fatal"] = fatal.group(1).strip()
        current = _CURRENT.search(dump)
        frame = _FRAME.search(current.group(1)) if current else None
        data["where"] = f"{display_path(frame.group(1))}:{frame.group(2)} in {frame.group(3)}" if frame else None
        out.append(data)
    return sorted(out, key=lambda d: (host_order(str(d.get("host"))), str(d.get("rank")), int(d.get("pid", 0))))


def _who(record: dict[str, Any]) -> str:
    rank = record.get("rank")
    argv = " ".join(display_path(a) if a.endswith(".py") else a for a in record.get("argv") or [])[:80]
    return f"{'rank ' + str(rank) + ' ' if rank not in (None, '') else ''}(pid {record.get('pid')}, `{argv}`)"


def explain(records: Sequence[dict[str, Any]], logs: dict[str, Path]) -> list[Diagnostic]:
    """One diagnostic per host with processes that died at interpreter exit."""
    out = []
    for host, items in by_host(records):
        fatal = sorted({r["fatal"] for r in items})
        where = sorted({r["where"] for r in items if r.get("where")})
        try:
            terminates = len(re.findall(re.escape(TERMINATE), logs[host].read_text(errors="replace")))
        except (KeyError, OSError):
            terminates = 0
        detail = [f"{', '.join(fatal)}"]
        if where:
            detail.append(f"in {', '.join(where)}")
        else:
            detail.append("in a thread with no Python frame (a C++ thread)")
        if terminates:
            detail.append(f"{terminates} × '{TERMINATE}' in {logs[host]}")
        hint = (" A C++ thread still running at exit (gloo's, when the script asked for gloo and did not call "
                "dist.destroy_process_group()) is the usual cause: call destroy_process_group() at the end."
                if terminates else "")
        out.append(Diagnostic(KIND, f"{host}: {', '.join(_who(r) for r in items)} ran the script to its end and then "
                              f"died at interpreter exit, after the script's last line ({'; '.join(detail)}): the "
                              f"work was done, the job failed in teardown.{hint}", (host,)))
    return out


class ExitDeaths(AttemptRecords):
    """Explains a ``Failed`` job whose processes died at interpreter exit (see the module docstring)."""

    def report(self, finish: FinishContext) -> Report:
        if finish.status != "Failed" or not finish.diag_dir.is_dir():
            return Report()
        found = explain(load(finish.diag_dir, since=self.since), {h.name: h.log for h in finish.hosts})
        return Report(diagnostics=found)


__all__ = ["KIND", "TERMINATE", "ExitDeaths", "explain", "load"]
