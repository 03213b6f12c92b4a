"""Declarative faults: what to break in a running job, when, and the injector that does it.

A fault is a frozen value (:class:`Kill`, :class:`KillRank`, :class:`Freeze`, :class:`Slow`,
:class:`NetCut`, :class:`Spot`) with a :class:`Trigger`: a time since the job's hosts started, or
the first log line of the target host (any host for ``spot``) that matches a regular expression.
The CLI form (``--fault``) is parsed by :func:`parse`::

    kill:HOST[:SIGNAL][@TRIGGER]           signal the host (SIGTERM reaches its PID 1 only, as
                                           ``docker kill --signal``; SIGKILL kills every process)
    kill-rank:HOST:RANK[:SIGNAL][@TRIGGER] signal the processes of one global rank on HOST
                                           (RANK or OMPI_COMM_WORLD_RANK in /proc/<pid>/environ)
    freeze:HOST[:SECONDS][@TRIGGER]        SIGSTOP every process of the host (for SECONDS, else
                                           until the job ends): a hung instance
    slow:HOST:FRACTION[:PERIOD][@TRIGGER]  run the host only FRACTION (0 < f < 1) of each PERIOD
                                           (default 0.5 s) by SIGSTOP/SIGCONT: a straggler
    netcut:HOST[@TRIGGER]                  take the host's eth0 link down; processes keep running
    spot[@TRIGGER]                         a spot interruption: the supervisor stops every host
                                           and restarts the job with /opt/ml/checkpoints restored

    TRIGGER := <seconds>[s|ms]  |  log=/<regex>/        (default: 0s, right after start)

Examples: ``kill:algo-2:SIGKILL@5s``, ``kill:algo-2:SIGTERM@log=/epoch 3/``,
``kill-rank:algo-2:1:SIGKILL@log=/step 10/``, ``freeze:algo-2@5s``, ``slow:algo-2:0.5``,
``netcut:algo-2@5s``, ``spot@10s``.

:class:`FaultInjector` is driven by the supervisor: ``on_line`` for every host log line, ``tick``
every poll, ``spot_requested`` to learn that a spot interruption is due. It acts only through the
backend's :class:`~emulator.backends.base.JobHandle`, so it works on every backend.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..backends.base import JobHandle
from ..errors import RequestError
from ..inhost import protocol as P
from ..observers import AttemptContext, Event, FinishContext, Observer, Report

FIELD = "--fault"
GRAMMAR = ("kill:HOST[:SIGNAL], kill-rank:HOST:RANK[:SIGNAL], freeze:HOST[:SECONDS], "
           "slow:HOST:FRACTION[:PERIOD], netcut:HOST, spot; each optionally @<seconds>s or "
           "@log=/<regex>/ (e.g. kill:algo-2:SIGKILL@5s)")
HOST_RE = re.compile(r"^algo-[1-9][0-9]*$")
DEFAULT_SLOW_PERIOD = 0.5
#: The environment variables that carry a process's global rank (torchrun/smddprun, Open MPI).


@dataclass(frozen=True)
class Trigger:
    """When a fault fires: ``seconds`` after the hosts started, or the first matching log line."""

    seconds: float = 0.0
    log_pattern: str | None = None

    def describe(self) -> str:
        return f"log=/{self.log_pattern}/" if self.log_pattern is not None else f"{self.seconds:g}s"


@dataclass(frozen=True)
class Kill:
    """Send ``sig`` to ``host`` (SIGKILL: every process; others: the host's PID 1)."""

    host: str
    sig: int = signal.SIGKILL
    at: Trigger = field(default_factory=Trigger)

    kind = "kill"


@dataclass(frozen=True)
class KillRank:
    """Send ``sig`` to the processes of global rank ``rank`` on ``host``."""

    host: str
    rank: int
    sig: int = signal.SIGKILL
    at: Trigger = field(default_factory=Trigger)

    kind = "kill-rank"


@dataclass(frozen=True)
class Freeze:
    """SIGSTOP every process of ``host``; SIGCONT after ``seconds`` (None: never)."""

    host: str
    seconds: float | None = None
    at: Trigger = field(default_factory=Trigger)

    kind = "freeze"


@dataclass(frozen=True)
class Slow:
    """Let ``host`` run only ``fraction`` of every ``period`` seconds (SIGSTOP/SIGCONT)."""

    host: str
    fraction: float
    period: float = DEFAULT_SLOW_PERIOD
    at: Trigger = field(default_factory=Trigger)

    kind = "slow"


@dataclass(frozen=True)
class NetCut:
    """Cut ``host`` off the job network."""

    host: str
    at: Trigger = field(default_factory=Trigger)

    kind = "netcut"


@dataclass(frozen=True)
class Spot:
    """A managed-spot interruption of the whole job."""

    at: Trigger = field(default_factory=Trigger)

    kind = "spot"
    host = None


Fault = Kill | KillRank | Freeze | Slow | NetCut | Spot


@dataclass(frozen=True)
class FaultEvent:
    """One action the injector took. ``offset`` is seconds since the hosts started (the clock
    the supervisor passed in); ``wall`` is ``time.time()`` when it happened."""

    kind: str
    host: str | None
    action: str
    offset: float
    wall: float
    fault: str
    pids: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"Kind": self.kind, "Host": self.host, "Action": self.action,
                "Offset": round(self.offset, 3), "Wall": self.wall, "Fault": self.fault,
                "Pids": list(self.pids)}


# ---------------------------------------------------------------------------------------------
# Parsing


def _err(text: str, problem: str) -> RequestError:
    return RequestError(FIELD, f"{text!r}: {problem}", allowed=GRAMMAR)


def _signal(text: str, spec: str) -> int:
    name = text.strip().upper()
    if name.isdigit():
        try:
            return int(signal.Signals(int(name)))
        except ValueError:
            raise _err(spec, f"unknown signal number {name}") from None
    if not name.startswith("SIG"):
        name = "SIG" + name
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise _err(spec, f"unknown signal {text!r}") from None


def _seconds(text: str, spec: str, what: str) -> float:
    t = text.strip()
    scale = 1.0
    if t.endswith("ms"):
        t, scale = t[:-2], 0.001
    elif t.endswith("s"):
        t = t[:-1]
    try:
        value = float(t) * scale
    except ValueError:
        raise _err(spec, f"{what} {text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise _err(spec, f"{what} {text!r} must be a finite number >= 0")
    return value


def _trigger(text: str, spec: str) -> Trigger:
    if text.startswith("log="):
        body = text[4:]
        if len(body) < 3 or not body.startswith("/") or not body.endswith("/"):
            raise _err(spec, "a log trigger is log=/<regex>/ with a non-empty regex")
        pattern = body[1:-1]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise _err(spec, f"bad regular expression {pattern!r}: {exc}") from None
        return Trigger(log_pattern=pattern)
    if not text:
        raise _err(spec, "empty trigger after '@'")
    return Trigger(seconds=_seconds(text, spec, "trigger"))


def _host(text: str, spec: str) -> str:
    if not HOST_RE.match(text):
        raise _err(spec, f"{text!r} is not a host name (algo-1, algo-2, ...)")
    return text


def parse(spec: str) -> Fault:
    """Parse one ``--fault`` value; raise :class:`RequestError` (field ``--fault``) if malformed."""
    if not isinstance(spec, str) or not spec.strip():
        raise RequestError(FIELD, f"{spec!r} is empty", allowed=GRAMMAR)
    text = spec.strip()
    body, sep, trig = text.partition("@")
    at = _trigger(trig, spec) if sep else Trigger()
    parts = body.split(":")
    kind, args = parts[0], parts[1:]
    if kind == "kill":
        if not 1 <= len(args) <= 2:
            raise _err(spec, "kill takes HOST[:SIGNAL]")
        sig = _signal(args[1], spec) if len(args) > 1 else signal.SIGKILL
        return Kill(_host(args[0], spec), sig, at)
    if kind == "kill-rank":
        if not 2 <= len(args) <= 3:
            raise _err(spec, "kill-rank takes HOST:RANK[:SIGNAL]")
        if not args[1].isdigit():
            raise _err(spec, f"rank {args[1]!r} is not a whole number >= 0")
        return KillRank(_host(args[0], spec), int(args[1]),
                        _signal(args[2], spec) if len(args) > 2 else signal.SIGKILL, at)
    if kind == "freeze":
        if not 1 <= len(args) <= 2:
            raise _err(spec, "freeze takes HOST[:SECONDS]")
        seconds = _seconds(args[1], spec, "duration") if len(args) > 1 else None
        if seconds is not None and seconds <= 0:
            raise _err(spec, "a freeze duration must be > 0")
        return Freeze(_host(args[0], spec), seconds, at)
    if kind == "slow":
        if not 2 <= len(args) <= 3:
            raise _err(spec, "slow takes HOST:FRACTION[:PERIOD]")
        try:
            fraction = float(args[1])
        except ValueError:
            raise _err(spec, f"fraction {args[1]!r} is not a number") from None
        if not 0.0 < fraction < 1.0:
            raise _err(spec, f"fraction {fraction:g} must be between 0 and 1 (exclusive): "
                       "the share of time the host runs")
        period = _seconds(args[2], spec, "period") if len(args) > 2 else DEFAULT_SLOW_PERIOD
        if period < 0.1:
            raise _err(spec, "period must be at least 0.1 s (the injector ticks every 50 ms)")
        return Slow(_host(args[0], spec), fraction, period, at)
    if kind == "netcut":
        if len(args) != 1:
            raise _err(spec, "netcut takes HOST")
        return NetCut(_host(args[0], spec), at)
    if kind == "spot":
        if args:
            raise _err(spec, "spot takes no arguments (it interrupts every host)")
        return Spot(at)
    raise _err(spec, f"unknown fault kind {kind!r}")


def parse_all(specs: Iterable[str]) -> tuple[Fault, ...]:
    """Parse every ``--fault`` value given on the command line."""
    return tuple(parse(s) for s in specs)


def check(faults: Sequence[Fault], hosts: Sequence[str]) -> None:
    """Refuse faults that name a host the job does not have (call before any host starts)."""
    for f in faults:
        if f.host is not None and f.host not in hosts:
            raise RequestError(FIELD, f"{describe(f)!r} names {f.host}, but the job has "
                               f"{', '.join(hosts)}", allowed="a host of this job")


def describe(fault: Fault) -> str:
    """The CLI form of ``fault`` (``parse(describe(f)) == f``)."""
    at = "" if fault.at == Trigger() else "@" + fault.at.describe()
    if isinstance(fault, Kill):
        return f"kill:{fault.host}:{signal.Signals(fault.sig).name}{at}"
    if isinstance(fault, KillRank):
        return f"kill-rank:{fault.host}:{fault.rank}:{signal.Signals(fault.sig).name}{at}"
    if isinstance(fault, Freeze):
        duration = f":{fault.seconds:g}" if fault.seconds is not None else ""
        return f"freeze:{fault.host}{duration}{at}"
    if isinstance(fault, Slow):
        return f"slow:{fault.host}:{fault.fraction:g}:{fault.period:g}{at}"
    if isinstance(fault, NetCut):
        return f"netcut:{fault.host}{at}"
    return f"spot{at}"


# ---------------------------------------------------------------------------------------------
# Rank lookup


def _ppid(pid: int | None) -> int | None:
    stat = P.proc_stat(pid) if pid is not None else None
    return stat.ppid if stat is not None else None


def rank_pids(pids: Iterable[int], rank: int,
              environ: Mapping[int, Mapping[str, str]] | None = None) -> list[int]:
    """The PIDs among ``pids`` whose environment says global rank ``rank``, topmost first.

    A rank's own children (DataLoader workers) inherit its environment and are included; the
    processes of launchers (torchrun agent, orted, the toolkit) carry no rank and are not.
    ``environ`` may be given for tests; otherwise ``/proc/<pid>/environ`` is read.
    """
    matches: list[int] = []
    for pid in pids:
        env = environ[pid] if environ is not None and pid in environ else (
            {} if environ is not None else P.proc_environ(pid))
        values = {env.get(v) for v in P.RANK_VARIABLES} - {None}
        if str(rank) in values:
            matches.append(pid)
    found = set(matches)
    depth = {p: 0 for p in matches}
    if environ is None:
        for p in matches:
            parent, d = _ppid(p), 0
            while parent in found and d < 64:
                d += 1
                parent = _ppid(parent)
            depth[p] = d
    return sorted(matches, key=lambda p: (depth[p], p))


# ---------------------------------------------------------------------------------------------
# Injection


@dataclass
class _State:
    fault: Fault
    armed_at: float | None = None  # offset at which the trigger fired
    done: bool = False
    stopped: bool = False  # freeze/slow: the host is currently stopped
    started: bool = False  # freeze/slow: the first SIGSTOP was sent
    phase_start: float = 0.0


class FaultInjector:
    """Performs due faults on a running job through its :class:`JobHandle`.

    ``clock_start`` and the ``now`` given to :meth:`tick` are on the same clock (the supervisor's,
    e.g. ``time.monotonic()`` when the hosts started). :meth:`on_line` may be called from another
    thread (the log tailer); it only arms triggers, actions happen in :meth:`tick`.

    Spot: :meth:`spot_requested` turns True when a ``spot`` fault fires and stays True; the
    supervisor stops the hosts and restarts the job, and :class:`FaultObserver` carries the
    faults that have not acted (:meth:`pending`) into a new injector for the new hosts, those
    whose trigger already fired (:meth:`armed`) still armed: a ``kill-rank`` that was waiting for
    its rank acts on the new hosts' rank. A fault that acted never acts twice.

    ``armed``: faults of ``faults`` (the same objects) whose trigger fired in an earlier attempt.
    """

    def __init__(self, faults: Sequence[Fault], handle: JobHandle, clock_start: float,
                 wall: Callable[[], float] = time.time, armed: Sequence[Fault] = ()) -> None:
        self.handle = handle
        self.clock_start = clock_start
        self.wall = wall
        self._states = [_State(f, armed_at=0.0 if any(a is f for a in armed) else None) for f in faults]
        self._lock = threading.Lock()
        self._last = 0.0
        self._spot = False
        self.events: list[FaultEvent] = []
        self._patterns = {id(s): re.compile(s.fault.at.log_pattern)
                          for s in self._states if s.fault.at.log_pattern is not None}

    # -- inputs -------------------------------------------------------------------------------

    def on_line(self, host: str, line: str) -> None:
        """Arm log-triggered faults whose pattern matches ``line`` of ``host``."""
        with self._lock:
            for s in self._states:
                if s.armed_at is not None or s.done:
                    continue
                pattern = self._patterns.get(id(s))
                if pattern is None or (s.fault.host is not None and s.fault.host != host):
                    continue
                if pattern.search(line):
                    s.armed_at = self._last

    def tick(self, now: float) -> list[FaultEvent]:
        """Perform every due action; return what was done (empty when nothing was due)."""
        offset = now - self.clock_start
        out: list[FaultEvent] = []
        with self._lock:
            self._last = offset
            for s in self._states:
                if s.done:
                    continue
                at = s.fault.at
                if s.armed_at is None and at.log_pattern is None and offset >= at.seconds:
                    s.armed_at = offset
                if s.armed_at is None:
                    continue
                out.extend(self._act(s, offset))
        self.events.extend(out)
        return out

    def spot_requested(self) -> bool:
        """True once a ``spot`` fault has fired."""
        return self._spot

    def pending(self) -> list[Fault]:
        """Faults that have not acted yet: their trigger has not fired, or it has and they still
        wait for their target (a ``kill-rank`` whose rank has not started)."""
        return [s.fault for s in self._states if not s.done and not s.started]

    def armed(self) -> list[Fault]:
        """Those of :meth:`pending` whose trigger has fired."""
        return [s.fault for s in self._states if not s.done and not s.started and s.armed_at is not None]

    def close(self, now: float | None = None) -> list[FaultEvent]:
        """Thaw every host this injector stopped (call before teardown). Idempotent."""
        offset = (time.monotonic() if now is None else now) - self.clock_start
        out = []
        with self._lock:
            for s in self._states:
                if s.stopped and s.fault.host is not None:
                    out.append(self._send(s, signal.SIGCONT, offset, "thaw (job ending)"))
                    s.stopped = False
                s.done = True
        self.events.extend(out)
        return out

    # -- actions ------------------------------------------------------------------------------

    def _event(self, s: _State, action: str, offset: float, pids: Sequence[int] = ()) -> FaultEvent:
        return FaultEvent(s.fault.kind, s.fault.host, action, offset, self.wall(),
                          describe(s.fault), tuple(pids))

    def _send(self, s: _State, sig: int, offset: float, action: str) -> FaultEvent:
        host = self.handle.hosts.get(s.fault.host or "")
        pids: list[int] = []
        if host is not None:
            pids = host.pids()
            host.signal(sig)
        return self._event(s, action, offset, pids)

    def _act(self, s: _State, offset: float) -> list[FaultEvent]:
        f = s.fault
        if isinstance(f, Spot):
            s.done = True
            self._spot = True
            return [self._event(s, "spot interruption requested", offset)]
        host = self.handle.hosts.get(f.host or "")
        if host is None or host.poll() is not None:
            s.done, s.stopped = True, False
            return [] if s.started else [self._event(s, "skipped: host not running", offset)]
        if isinstance(f, Kill):
            s.done = True
            return [self._send(s, f.sig, offset, f"signal {signal.Signals(f.sig).name}")]
        if isinstance(f, KillRank):
            targets = rank_pids(host.pids(), f.rank)
            if not targets:
                return []  # the rank has not started yet: try again next tick
            s.done = True
            for pid in targets:
                try:
                    os.kill(pid, f.sig)
                except ProcessLookupError:
                    pass
            return [self._event(s, f"signal {signal.Signals(f.sig).name} to rank {f.rank}", offset,
                                targets)]
        if isinstance(f, NetCut):
            s.done = True
            self.handle.disconnect(f.host)
            return [self._event(s, "network cut", offset)]
        if isinstance(f, Freeze):
            if not s.started:
                s.started, s.stopped, s.phase_start = True, True, offset
                if f.seconds is None:
                    s.done = True  # stays frozen; close() or teardown thaws/kills it
                return [self._send(s, signal.SIGSTOP, offset, "freeze (SIGSTOP)")]
            if f.seconds is not None and offset - s.phase_start >= f.seconds:
                s.stopped, s.done = False, True
                return [self._send(s, signal.SIGCONT, offset, "thaw (SIGCONT)")]
            return []
        if isinstance(f, Slow):
            if not s.started:
                s.started, s.stopped, s.phase_start = True, True, offset
                action = f"throttle to {f.fraction:g} (SIGSTOP)"
                return [self._send(s, signal.SIGSTOP, offset, action)]
            stopped_for = f.period * (1.0 - f.fraction)
            elapsed = offset - s.phase_start
            if s.stopped and elapsed >= stopped_for:
                s.stopped = False
                host.signal(signal.SIGCONT)
            elif not s.stopped and elapsed >= f.period:
                s.stopped, s.phase_start = True, offset
                host.signal(signal.SIGSTOP)
            return []
        return []


class FaultObserver(Observer):
    """The supervisor's side of faults: one :class:`FaultInjector` per attempt.

    Trigger times count from the moment the job's hosts first started (the first attempt), so
    ``spot@10s`` then ``kill:algo-2@35s`` kills algo-2 35 s into the job, in whichever attempt
    runs then. Faults that have not acted when a spot interruption ends an attempt carry over
    into the next one: those not yet triggered wait for their trigger (log triggers match the
    new hosts' lines), those already triggered (a ``kill-rank`` waiting for its rank) stay armed.
    """

    def __init__(self, faults: Sequence[Fault]) -> None:
        self._pending: list[Fault] = list(faults)
        self._armed: list[Fault] = []
        self._injector: FaultInjector | None = None
        self._origin: float | None = None
        self._now = 0.0
        self.events: list[FaultEvent] = []

    def on_start(self, ctx: AttemptContext) -> None:
        if self._origin is None:
            self._origin = ctx.started
        wall = ctx.wall_started - ctx.started  # wall clock = monotonic + this

        def now() -> float:
            return wall + self._now

        self._injector = FaultInjector(self._pending, ctx.handle, self._origin, now,
                                       armed=self._armed) if self._pending else None
        self._now = ctx.started

    def on_line(self, host: str, line: str) -> None:
        injector = self._injector
        if injector is not None:
            injector.on_line(host, line)

    def on_tick(self, now: float) -> Sequence[Event]:
        self._now = now
        return self._record(self._injector.tick(now)) if self._injector is not None else ()

    def restart_requested(self) -> bool:
        return self._injector is not None and self._injector.spot_requested()

    def on_end(self, now: float) -> Sequence[Event]:
        injector, self._injector = self._injector, None
        if injector is None:
            return ()
        self._pending = injector.pending()  # before close(), which marks every fault done
        self._armed = injector.armed()
        return self._record(injector.close(now))

    def _record(self, done: Sequence[FaultEvent]) -> list[Event]:
        self.events.extend(done)
        return [Event(e.wall, "fault", e.host, f"{e.fault}: {e.action}") for e in done]

    def report(self, finish: FinishContext) -> Report:
        return Report(emulator={"Faults": [e.to_dict() for e in self.events]})
