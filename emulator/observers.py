"""Observers of a running job: the supervisor's extension points.

Faults, stack capture, collective checks and the timeline watch a job without owning it. The
supervisor calls every observer at fixed points of each attempt (one start of the job's hosts; a
spot interruption makes another) and once at the end; observers never start or stop hosts
themselves, except through what :class:`AttemptContext` hands them (the running job's handle, for
signals and ``exec_argv``).

Order of calls per attempt::

    on_start(ctx) → (on_line(host, line) from the log thread | on_tick(now), restart_requested(),
    failure_requested())* →
    [before_stop(reason), when the supervisor stops hosts that still run] → on_end(now)

and after the last attempt, while the job's scratch folder (with the ranks' diagnostics records)
still exists: ``report(finish)``.

Every hook has a no-op default in :class:`Observer`; subclass it and override what you need. The
supervisor calls each hook directly (typed, no dispatch by name). One error policy for every hook,
``report`` and ``deviations`` included: an observer's exception never breaks the job; that call
is skipped (no events, no restart or failure request, no report from it) and recorded once per
observer and hook as an ``observer-error`` diagnostic in ``job.json``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backends.base import JobHandle
    from .job.result import Diagnostic, HostOutcome


class StopReason(str, enum.Enum):
    """Why the supervisor is about to stop hosts that are still running."""

    FAIL_FAST = "fail-fast"  # a host failed; the others are stopped
    MAX_RUNTIME = "max-runtime"  # StoppingCondition.MaxRuntimeInSeconds passed
    STOP_REQUEST = "stop-request"  # StopTrainingJob (SDK session) or the API's stop event
    INTERRUPT = "interrupt"  # Ctrl-C or SIGTERM to the emulator
    SPOT = "spot"  # a spot interruption (the job restarts)
    DIAGNOSIS = "diagnosis"  # an observer named an error the job cannot recover from (a rendezvous error)


@dataclass(frozen=True)
class Event:
    """Something that happened to the job, for ``job.json`` and the timeline (wall-clock time)."""

    time: float
    kind: str  # status | host-start | host-exit | first-failure | stop | fault | restart
    host: str | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"Time": self.time, "Kind": self.kind, "Host": self.host, "Detail": self.detail}


@dataclass(frozen=True)
class AttemptContext:
    """What observers get when an attempt's hosts have started."""

    attempt: int  # 0 for the first start, +1 per spot restart
    handle: JobHandle
    hosts: tuple[str, ...]  # algo-1..N
    diag_dir: Path  # this machine's path of the hosts' EMULATOR_DIAG_DIR
    started: float  # the supervisor's monotonic clock when the hosts started
    wall_started: float  # time.time() then
    #: Print a line on the job's console now (``[emulator] …``; nothing when the job is quiet).
    say: Callable[[str], None] = field(default=lambda _text: None, compare=False)
    #: How many rank processes the toolkit's launchers start, from the job's layout (hosts x
    #: processes per host); None when unknown (the plain process runner: a script may spawn ranks).
    expected_processes: int | None = None

    @property
    def records_since(self) -> float:
        """The wall-clock time from which in-host records belong to this attempt (a second of slack
        for clocks read in other processes): an interrupted (spot) attempt's records are older."""
        return self.wall_started - 1.0


@dataclass(frozen=True)
class FinishContext:
    """What observers get once the job has ended (before the scratch folder is removed)."""

    job_dir: Path
    diag_dir: Path
    status: str  # Completed | Failed | Stopped
    secondary_status: str
    hosts: tuple[HostOutcome, ...]
    events: tuple[Event, ...]
    first_failure: str | None  # host


@dataclass
class Report:
    """What an observer adds to the result: diagnostics, warnings, fields of ``job.json``'s
    ``Emulator`` object, DescribeTrainingJob fields it fills (``description``, e.g.
    ``FinalMetricDataList``), and lines for the console summary."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    emulator: dict[str, Any] = field(default_factory=dict)
    console: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    description: dict[str, Any] = field(default_factory=dict)


class Observer:
    """Base class with no-op hooks (see the module docstring for the order of calls)."""

    def on_start(self, ctx: AttemptContext) -> None:
        """The attempt's hosts have started."""

    def on_line(self, host: str, line: str) -> None:
        """A complete line of ``host``'s log (called from the log-tailer thread)."""

    def on_tick(self, now: float) -> Sequence[Event]:
        """Called every poll (``now``: the supervisor's monotonic clock); return what happened."""
        return ()

    def restart_requested(self) -> bool:
        """True to make the supervisor stop every host and start the job again (spot)."""
        return False

    def failure_requested(self) -> str | None:
        """A ``FailureReason`` to make the supervisor stop every host and end the job ``Failed`` now
        (an error the job cannot recover from, such as a broken rendezvous); None to go on."""
        return None

    def deviations(self) -> list[str]:
        """Sentences for ``Emulator.Deviations``: what this observer made the job do that SageMaker
        would not have (asked once the job has ended)."""
        return []

    def before_stop(self, reason: StopReason) -> Sequence[Event]:
        """Hosts that still run are about to get SIGTERM (then SIGKILL after the grace)."""
        return ()

    def on_end(self, now: float) -> Sequence[Event]:
        """The attempt is over; its hosts are being torn down."""
        return ()

    def report(self, finish: FinishContext) -> Report:
        """Called once after the last attempt."""
        return Report()


class AttemptRecords(Observer):
    """An observer that reads the in-host records (:attr:`AttemptContext.records_since`) of the
    current attempt only: a spot restart's earlier attempt is not read again."""

    def __init__(self) -> None:
        self.since = 0.0

    def on_start(self, ctx: AttemptContext) -> None:
        self.since = ctx.records_since
