"""The console summary a job prints when it ends (``echo``): each host and how it ended, the
status, the first rank to die (``Emulator.FirstDeath``: :mod:`emulator.diagnostics.firstdeath`),
the first failing host's last log lines, ``FailureReason``, the observers' lines, warnings,
diagnostics and where ``job.json`` is. For people; ``job.json`` (:mod:`emulator.description`) is
the record."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from .console import paint, table, tail
from .job.result import JobResult

#: How many of the first failing host's last log lines the summary shows.
FAILED_LOG_LINES = 20


def write_summary(result: JobResult, stream: TextIO, console: Sequence[str]) -> None:
    """Write the summary of ``result`` to ``stream``; ``console``: the observers' lines."""
    rows = [(h.name, h.how, str(h.log)) for h in result.hosts]
    colour = "32" if result.ok else "31"
    stream.write("\n" + table(["host", "ended", "log"], rows) + "\n")
    stream.write(paint(f"{result.job_name}: {result.status} ({result.secondary_status})", colour, stream) + "\n")
    first_death = result.first_death
    if first_death is not None:  # above the host that exited first: often a secondary failure
        from .diagnostics.firstdeath import headline

        lines = headline(first_death)
        stream.write(paint(lines[0], "31", stream) + "\n" + "".join(line + "\n" for line in lines[1:]))
    if result.first_failure is not None:
        host = next(h for h in result.hosts if h.name == result.first_failure)
        stream.write(f"first failure: {host.name} ({host.how}); last lines of {host.log}:\n")
        stream.write("\n".join("    " + line for line in tail(host.log, FAILED_LOG_LINES).splitlines()) + "\n")
    if result.failure_reason:
        stream.write(f"FailureReason: {result.failure_reason}\n")
    for line in console:
        stream.write(line + "\n")
    for w in result.warnings:
        stream.write(paint(f"warning: {w}", "33", stream) + "\n")
    for d in result.diagnostics:
        stream.write(paint(f"diagnostic ({d.kind}): {d.message}", "33", stream) + "\n")
    stream.write(f"job.json: {result.job_dir / 'job.json'}\n")
    stream.flush()
