"""Quiet failures: a job that ended ``Completed`` although a process or thread in it died.

A sibling of :mod:`emulator.diagnostics.quirks`, which explains *why* the toolkit reports success for a failed
launcher (native launcher, swallowed gloo error, MPI workers, "Received N" then SUCCESS); this
module names *which* processes failed, from what the in-host code recorded the moment it happened
(``_sm_emulator_exits``: ``exit-<host>-<pid>-<n>.json``):

- an exception nobody caught ended a Python process (``sys.excepthook``);
- an exception ended a thread (``threading.excepthook``) while the process went on;
- a ``multiprocessing``/``torch.multiprocessing`` child exited non-zero and its parent did not
  fail — e.g. the PyTorch toolkit's own ``distributed_operations.py`` test script, whose workers
  fail on ``nccl`` on a CPU instance while the script still writes its success file.

Not repeated here: a launcher that fails because its child failed (torchrun's ``ChildFailedError``)
— its exit code is what :mod:`emulator.diagnostics.quirks` reads. Decided on purpose: a traceback that the
script prints and then handles (``traceback.print_exc()``, ``logging.exception``, a retry loop)
is not a failure and gets no warning — only exceptions that
ended a process or a thread are recorded. Processes killed by a signal without a Python parent
noticing, and non-Python children, are not seen. Warnings are given only for ``Completed`` jobs
(a failed job says so already).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..inhost.protocol import EXIT_PREFIX
from ..observers import AttemptRecords, FinishContext, Report
from .stacks import by_host, display_path

#: At most this many processes are named per host (then "and N more").
PER_HOST = 4
#: Exceptions a launcher raises because a child failed: a consequence, reported through the
#: launcher's exit code, which :mod:`emulator.diagnostics.quirks` already explains (torchrun's agent).
LAUNCHER_CONSEQUENCES = frozenset({"ChildFailedError"})


def load(diag_dir: Path, *, since: float = 0.0) -> list[dict[str, Any]]:
    """The abnormal-end records in ``diag_dir`` written at or after ``since``, oldest first."""
    out = []
    for path in diag_dir.glob(f"{EXIT_PREFIX}*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if (isinstance(data, dict) and float(data.get("time", 0)) >= since
                and data.get("exception") not in LAUNCHER_CONSEQUENCES):
            out.append(data)
    return sorted(out, key=lambda d: float(d.get("time", 0)))


def _who(record: dict[str, Any]) -> str:
    argv = " ".join(display_path(a) if a.endswith(".py") else a for a in record.get("argv") or [])[:80]
    rank = record.get("rank")
    return f"{'rank ' + str(rank) + ', ' if rank not in (None, '') else ''}pid {record.get('pid')}" + (
        f", `{argv}`" if argv else "")


def _what(record: dict[str, Any]) -> str:
    where = record.get("where") or ""
    if where:
        path, _, rest = where.rpartition(":")
        where = f" at {display_path(path)}:{rest}" if path else f" at {where}"
    exc = f"{record.get('exception')}: {record.get('message') or ''}".rstrip(": ")
    kind = record.get("kind")
    if kind == "uncaught":
        return f"process ({_who(record)}) died of an uncaught {exc}{where}"
    if kind == "thread":
        return f"thread {record.get('thread')!r} of process ({_who(record)}) died of {exc}{where}"
    died = f" ({exc}{where})" if record.get("exception") else ""
    return (f"multiprocessing child {record.get('process')!r} ({_who(record)}) exited "
            f"{record.get('code')}{died} and its parent did not fail")


def warnings(records: Sequence[dict[str, Any]], logs: dict[str, Path]) -> list[str]:
    """One warning per host with abnormal ends (empty when there are none)."""
    out = []
    for host, items in by_host(records):
        named = "; ".join(_what(r) for r in items[:PER_HOST])
        more = f"; and {len(items) - PER_HOST} more" if len(items) > PER_HOST else ""
        log = f" (tracebacks in {logs[host]})" if host in logs else ""
        out.append(f"{host}: the job Completed although {named}{more}{log}. SageMaker would report this "
                   "job Completed too: check that the work these processes did is not missing.")
    return out


class QuietFailures(AttemptRecords):
    """Warns when a ``Completed`` job had processes or threads that died (see the module docstring)."""

    def report(self, finish: FinishContext) -> Report:
        if finish.status != "Completed" or not finish.diag_dir.is_dir():
            return Report()
        logs = {h.name: h.log for h in finish.hosts}
        return Report(warnings=warnings(load(finish.diag_dir, since=self.since), logs))


__all__ = ["QuietFailures", "load", "warnings"]
