"""Rendezvous checks: name a broken rendezvous while the ranks still wait in it.

Every process's ``init_process_group`` writes what it asks for *before* it blocks
(``rdzv-<host>-<pid>.json`` in the diagnostics folder; rank side: in-host
``_sm_emulator_rendezvous``). :class:`RendezvousCheck` reads those reports while the job runs and
names, at once, on the console and in ``job.json`` (``Emulator.Diagnostics``):

- ``rendezvous-duplicate-rank``: two processes in the rendezvous at the same time ask for the same
  rank ("rank 0 was requested by algo-1 (pid 31, LOCAL_RANK 0) and algo-2 (pid 30, LOCAL_RANK 0)");
- ``rendezvous-world-size``: processes disagree about the world size, or ask for a rank outside it,
  or for another world size than their launcher gave them;
- ``rendezvous-master``: processes meet at different masters (``MASTER_ADDR``/``MASTER_PORT``,
  compared after name resolution in the host, so ``algo-1`` and ``10.0.0.2`` are one master);
- ``rendezvous-missing-rank``: a rank nobody asks for. Judged while the job runs only when the
  launcher's process count is known (hosts x processes per host, from the job's layout), every
  reported process still waits, none has reported for :data:`MISSING_GRACE` seconds, and no
  running process of the job has the missing rank in its environment (``RANK``,
  ``OMPI_COMM_WORLD_RANK``): a rank whose process still runs is on its way (slow, or busy before
  its ``init_process_group``: the stacks at the stop show where), not missing. When the
  processes cannot be read (a docker engine's), nothing is called missing while the job runs. A
  job whose launcher count is unknown (the plain process runner: a script may spawn its own ranks)
  is judged only at the stop of a job that was stopped.

With a known fingerprint the likely cause is named: ``LOCAL_RANK`` passed as the global rank;
Lightning computing its global rank from ``NODE_RANK`` (unset under mpirun: AWS's documented
``LightningEnvironment`` fix is quoted); ``WORLD_SIZE`` taken from one host's GPU count.

SageMaker would leave such a job waiting until the backend's timeout or MaxRuntime. By default the
emulator stops it as ``Failed`` with the diagnosis as ``FailureReason`` (listed in
``Emulator.Deviations``); ``wait_on_rendezvous_errors`` (``--wait-on-rendezvous-errors``) keeps
SageMaker's behaviour and only reports. The same findings are repeated at the stop, beside the
stacks. Not checked: rendezvous through an explicit ``store=`` (compared by rank and world size
only), ``new_group`` subgroups, torch elastic's own agent rendezvous.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..inhost.protocol import RDZV_PREFIX
from ..job.request import host_order
from ..job.result import Diagnostic
from ..observers import AttemptContext, Event, FinishContext, Observer, Report
from .stacks import ranges

#: Seconds every reported process must have waited, with no new report, before a rank nobody asked
#: for is named (and only when every process the launcher started has reported).
MISSING_GRACE = 20.0
#: How often (seconds) the reports are read while the job runs.
POLL = 0.25
#: Seconds between naming an error and stopping the job, so that ranks still on their way to the
#: rendezvous (importing Lightning, say) are named in the FailureReason too.
SETTLE = 3.0
#: AWS's documented fix for Lightning under SMDDP (mpirun): the cluster environment's world size and
#: global rank from the launcher's environment. Source:
#: https://docs.aws.amazon.com/sagemaker/latest/dg/data-parallel-modify-sdp-pt-lightning.html
LIGHTNING_FIX = ('env = LightningEnvironment(); env.world_size = lambda: int(os.environ["WORLD_SIZE"]); '
                 'env.global_rank = lambda: int(os.environ["RANK"]); DDPStrategy(cluster_environment=env, ...)')
KINDS = ("rendezvous-duplicate-rank", "rendezvous-world-size", "rendezvous-master", "rendezvous-missing-rank")
#: ``FailureReason`` prefix of a job the emulator stopped for a rendezvous error.
REASON_PREFIX = "RendezvousError (emulator; SageMaker would wait): "
DEVIATION = ("stopped on a rendezvous error: the job was ended as Failed when its rendezvous could not "
             "complete (SageMaker would wait until the backend's timeout or MaxRuntime; "
             "--wait-on-rendezvous-errors keeps that)")


@dataclass(frozen=True)
class Ask:
    """One process's rendezvous report."""

    host: str
    pid: int
    rank: int | None
    world_size: int | None
    rank_from: str
    backend: str | None
    master: tuple[str | None, str | None]  # (address as asked, port)
    master_key: tuple[str | None, str | None]  # (resolved address, port)
    env: dict[str, str]
    lightning: bool
    state: str  # waiting | joined
    time: float
    joined: float | None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Ask:
        return cls(str(d["host"]), int(d["pid"]), _int(d.get("rank")), _int(d.get("world_size")),
                   str(d.get("rank_from", "")), d.get("backend"), (d.get("master_addr"), d.get("master_port")),
                   (d.get("master_ip") or d.get("master_addr"), d.get("master_port")), dict(d.get("env") or {}),
                   bool(d.get("lightning")), str(d.get("state", "waiting")), float(d.get("time", 0.0)),
                   None if d.get("joined") is None else float(d["joined"]))

    @property
    def local_rank(self) -> int | None:
        return _int(self.env.get("LOCAL_RANK", self.env.get("OMPI_COMM_WORLD_LOCAL_RANK")))

    @property
    def launcher_rank(self) -> int | None:
        """The global rank the launcher gave this process (torchrun's ``RANK``, Open MPI's)."""
        return _int(self.env.get("OMPI_COMM_WORLD_RANK", self.env.get("RANK")))

    @property
    def launcher_world(self) -> int | None:
        return _int(self.env.get("OMPI_COMM_WORLD_SIZE", self.env.get("WORLD_SIZE")))

    @property
    def local_size(self) -> int | None:
        env = self.env
        return _int(env.get("LOCAL_WORLD_SIZE", env.get("OMPI_COMM_WORLD_LOCAL_SIZE", env.get("SM_NUM_GPUS"))))

    @property
    def under_mpirun(self) -> bool:
        return "OMPI_COMM_WORLD_RANK" in self.env

    def label(self) -> str:
        local = self.local_rank
        return f"{self.host} (pid {self.pid}{'' if local is None else f', LOCAL_RANK {local}'})"


def _int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def load(diag_dir: Path, *, since: float = 0.0) -> list[Ask]:
    """The reports in ``diag_dir`` written at or after ``since`` (wall clock), of the latest torch
    elastic restart (``TORCHELASTIC_RESTART_COUNT``) only."""
    asks = []
    for path in diag_dir.glob(f"{RDZV_PREFIX}*.json"):
        try:
            data = json.loads(path.read_text())
            if isinstance(data, dict) and "error" not in data and float(data.get("time", 0)) >= since:
                asks.append(Ask.from_dict(data))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being replaced, or not ours: read again next time
    restart = max((_int(a.env.get("TORCHELASTIC_RESTART_COUNT")) or 0 for a in asks), default=0)
    return sorted((a for a in asks if (_int(a.env.get("TORCHELASTIC_RESTART_COUNT")) or 0) == restart),
                  key=lambda a: (a.time, host_order(a.host), a.pid))


def cohort(asks: Sequence[Ask]) -> list[Ask]:
    """The processes in the rendezvous now: those still waiting, and those that joined after the
    first of them started waiting (a finished, earlier rendezvous does not count)."""
    waiting = [a for a in asks if a.state == "waiting"]
    if not waiting:
        return []
    start = min(a.time for a in waiting)
    return [a for a in asks if a.state == "waiting" or (a.joined is not None and a.joined >= start)]


def _hosts(asks: Iterable[Ask]) -> tuple[str, ...]:
    return tuple(sorted({a.host for a in asks}, key=host_order))


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _lightning_cause(claimants: Sequence[Ask]) -> bool:
    return all(a.lightning and a.under_mpirun and "NODE_RANK" not in a.env for a in claimants)


def duplicates(asks: Sequence[Ask]) -> list[Diagnostic]:
    """Ranks asked for by more than one process of the rendezvous."""
    by_rank: dict[int, list[Ask]] = defaultdict(list)
    for a in asks:
        if a.rank is not None:
            by_rank[a.rank].append(a)
    dup = {rank: claimants for rank, claimants in sorted(by_rank.items()) if len(claimants) > 1}
    if not dup:
        return []
    everyone = [a for claimants in dup.values() for a in claimants]
    parts = [f"rank {rank} was requested by "
             f"{_and([a.label() for a in sorted(claimants, key=lambda a: (host_order(a.host), a.pid))])}"
             for rank, claimants in dup.items()]
    given = sorted({a.launcher_rank for a in everyone if a.launcher_rank is not None})
    if _lightning_cause(everyone):
        cause = ("Lightning computes the global rank as NODE_RANK x processes per node + LOCAL_RANK, and "
                 "NODE_RANK is unset under mpirun (0 on every host); the launcher gave these processes "
                 f"ranks {ranges(given)}. AWS's documented fix: {LIGHTNING_FIX}")
    elif all(a.local_rank is not None and a.rank == a.local_rank for a in everyone) and any(
            a.launcher_rank is not None and a.launcher_rank != a.rank for a in everyone):
        cause = (f"the script passes LOCAL_RANK as the global rank (the launcher gave these processes RANK "
                 f"{ranges(given)}); pass rank=int(os.environ['RANK']) or leave rank to env://")
    else:
        cause = "every process needs its own rank: a hard-coded rank or node rank usually causes this"
    return [Diagnostic("rendezvous-duplicate-rank", f"{'; '.join(parts)}: {cause}", _hosts(everyone))]


def world_sizes(asks: Sequence[Ask]) -> list[Diagnostic]:
    """World sizes that disagree, ranks outside the world, worlds other than the launcher's."""
    by_size: dict[int, list[Ask]] = defaultdict(list)
    for a in asks:
        if a.world_size is not None:
            by_size[a.world_size].append(a)
    if len(by_size) > 1:
        parts = [f"world size {size} by {_and([a.label() for a in group])}" for size, group in sorted(by_size.items())]
        return [Diagnostic("rendezvous-world-size", f"processes ask for different world sizes: {'; '.join(parts)}. "
                           "Check WORLD_SIZE, the launcher's process count per host and the instance count.",
                           _hosts(asks))]
    if not by_size:
        return []
    (size, group), = by_size.items()
    outside = [a for a in group if a.rank is not None and a.rank >= size]
    launcher = sorted({a.launcher_world for a in group if a.launcher_world is not None})
    if not outside and (not launcher or launcher == [size]):
        return []
    local = sorted({a.local_size for a in group if a.local_size is not None})
    what = (f"ranks {ranges(sorted({a.rank for a in outside if a.rank is not None}))} "
            f"({_and(list(_hosts(outside)))}) are outside it" if outside else "")
    if launcher and launcher != [size]:
        what += f"{'; ' if what else ''}the launcher started a world of {ranges(launcher)}"
    cause = (f": WORLD_SIZE looks taken from one host's GPU count ({size}); the world is hosts x GPUs per host"
             if local == [size] and launcher and launcher[0] > size else
             ". Leave world_size to env:// (WORLD_SIZE) or compute it as hosts x processes per host")
    return [Diagnostic("rendezvous-world-size", f"every process asks for world size {size}, but {what}{cause}",
                       _hosts(group))]


def masters(asks: Sequence[Ask]) -> list[Diagnostic]:
    """Processes that meet at different masters."""
    by_master: dict[tuple[str | None, str | None], list[Ask]] = defaultdict(list)
    for a in asks:
        if a.master_key[0] not in (None, "store"):
            by_master[a.master_key].append(a)
    if len(by_master) < 2:
        return []
    parts = []
    for group in sorted(by_master.values(), key=len, reverse=True):
        addr, port = group[0].master
        parts.append(f"{addr}:{port} by {_and([a.label() for a in group])}")
    return [Diagnostic("rendezvous-master", f"processes meet at different masters: {'; '.join(parts)}. Every rank "
                       "must use the same MASTER_ADDR/MASTER_PORT (SageMaker's launchers use algo-1 and port 7777).",
                       _hosts(asks))]


def missing(asks: Sequence[Ask], alive: set[int] | None = None) -> list[Diagnostic]:
    """Ranks of an agreed world that no process asks for (the caller decides whether it is time).
    ``alive``: the launcher ranks of processes still running; a rank among them is on its way (slow,
    or busy before its ``init_process_group``), not missing."""
    sizes = {a.world_size for a in asks}
    if len(sizes) != 1 or None in sizes:
        return []
    size = next(iter(s for s in sizes if s is not None))
    gone = sorted(set(range(size)) - {a.rank for a in asks} - (alive or set()))
    if not gone or any(a.state != "waiting" for a in asks):
        return []
    present = sorted(a.rank for a in asks if a.rank is not None)
    return [Diagnostic("rendezvous-missing-rank",
                       f"rank{'s' if len(gone) > 1 else ''} {ranges(gone)} of world size {size} never called "
                       f"init_process_group, while ranks {ranges(present)} ({_and(list(_hosts(asks)))}) wait for "
                       f"{'them' if len(gone) > 1 else 'it'} in the rendezvous", _hosts(asks))]


def check(asks: Sequence[Ask], *, judge_missing: bool,
          alive: Callable[[], set[int] | None] = lambda: set()) -> list[Diagnostic]:
    """Every rendezvous problem of the processes in ``asks`` (one rendezvous: see :func:`cohort`).
    ``alive`` (asked only when a rank is missing): the launcher ranks of processes still running,
    or None when they cannot be seen (then no rank is called missing)."""
    found = [*duplicates(asks), *world_sizes(asks), *masters(asks)]
    if judge_missing and not found and missing(asks, set()):
        running = alive()
        if running is not None:
            found += missing(asks, running)
    return found


def launcher_ranks_alive(handle: Any, hosts: Sequence[str], asks: Sequence[Ask]) -> set[int] | None:
    """The launcher ranks (``RANK``/``OMPI_COMM_WORLD_RANK`` in their environment) of the job's
    running processes; None when they cannot be read (e.g. a docker engine's processes), which is
    known because the waiting processes themselves are not all seen."""
    from ..inhost.protocol import proc_environ

    seen: set[int] = set()
    try:
        for host in hosts:
            for pid in handle.hosts[host].pids():
                env = proc_environ(pid)
                rank = _int(env.get("OMPI_COMM_WORLD_RANK", env.get("RANK")))
                if rank is not None and "python" in " ".join(_cmdline(pid))[:200]:
                    seen.add(rank)
    except Exception:
        return None
    waiting = {a.launcher_rank for a in asks}
    return seen if None not in waiting and waiting <= seen else None


def _cmdline(pid: int) -> list[str]:
    from ..inhost.protocol import proc_cmdline

    return proc_cmdline(pid)


def expected_processes(launchers: Iterable[Sequence[str] | None]) -> int | None:
    """How many rank processes the toolkit's predicted launchers start (torchrun's
    ``--nproc_per_node`` on every host, mpirun's ``-np``); None when unknown (plain process runner)."""
    total, known = 0, False
    for argv in launchers:
        argv = list(argv or ())
        for flag in ("--nproc_per_node", "--nproc-per-node"):
            if flag in argv and argv.index(flag) + 1 < len(argv):
                total, known = total + int(argv[argv.index(flag) + 1]), True
        if argv and "mpirun" in argv[0] and "-np" in argv:
            return int(argv[argv.index("-np") + 1])
    return total if known else None


class RendezvousCheck(Observer):
    """Reads the rendezvous reports while the job runs; says a problem at once and (unless told to
    wait) asks the supervisor to fail the job with it. See the module docstring."""

    def __init__(self, *, wait: bool = False, expected: int | None = None, grace: float | None = None) -> None:
        self.wait = wait
        self.expected = expected
        self.grace = MISSING_GRACE if grace is None else grace
        self.found: list[Diagnostic] = []
        self.reason: str | None = None
        self.fail_at: float | None = None
        self.since = 0.0
        self.diag_dir: Path | None = None
        self.say: Callable[[str], None] = lambda _text: None
        self.ctx: AttemptContext | None = None
        self.clock: Callable[[], float] | None = None
        self.next_poll = 0.0
        self.events: list[Event] = []

    def on_start(self, ctx: AttemptContext) -> None:
        self.since, self.diag_dir, self.say = ctx.records_since, ctx.diag_dir, ctx.say
        self.ctx = ctx
        self.expected = ctx.expected_processes if ctx.expected_processes is not None else self.expected
        self.next_poll = 0.0
        self.found.clear()
        self.reason = None
        self.fail_at = None

    def _new(self, diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
        """The diagnostics not said yet; one per kind is kept, the latest (the most complete: a
        collision seen with two ranks is seen again with all of them)."""
        new = [d for d in diagnostics if d not in self.found]
        kinds = {d.kind for d in new}
        self.found = [d for d in self.found if d.kind not in kinds] + new
        return new

    def on_tick(self, now: float) -> Sequence[Event]:
        if self.fail_at is not None and now >= self.fail_at and self.reason is None:
            self.reason = REASON_PREFIX + " | ".join(d.message for d in self.found)
        if self.diag_dir is None or now < self.next_poll or not self.diag_dir.is_dir():
            return ()
        self.next_poll = now + POLL
        asks = cohort(load(self.diag_dir, since=self.since))
        if not asks:
            return ()
        latest = max(a.time for a in asks)
        quiet = time.time() - latest >= self.grace
        judge = quiet and self.expected is not None  # the launcher (and so each rank's RANK) is known
        ctx = self.ctx
        new = self._new(check(asks, judge_missing=judge and ctx is not None,
                              alive=lambda: None if ctx is None else launcher_ranks_alive(ctx.handle, ctx.hosts, asks)))
        events = []
        for d in new:
            self.say(f"rendezvous error ({d.kind}): {d.message}")
            events.append(Event(time.time(), "diagnostic", None, d.kind))
            if not self.wait and self.fail_at is None:
                self.fail_at = now + SETTLE
                self.say(f"stopping the job as Failed in {SETTLE:g} s (SageMaker would wait; "
                         "--wait-on-rendezvous-errors keeps that)")
        if self.fail_at is not None and now >= self.fail_at and self.reason is None:
            self.reason = REASON_PREFIX + " | ".join(d.message for d in self.found)
        return events

    def failure_requested(self) -> str | None:
        return self.reason

    def deviations(self) -> list[str]:
        return [DEVIATION] if self.reason is not None else []

    def report(self, finish: FinishContext) -> Report:
        """What was found while the job ran, and what the reports show at the stop of a job that
        did not complete (a rank nobody asked for only when the job was stopped, i.e. hung: a job
        that failed lost its ranks for another reason)."""
        if finish.status != "Completed" and finish.diag_dir.is_dir():
            asks = cohort(load(finish.diag_dir, since=self.since))
            self._new(check(asks, judge_missing=finish.status == "Stopped"))
        found = list(self.found)
        console = []
        if found and finish.status != "Completed":
            console = ["rendezvous at the stop (the diagnostics below say why it could not complete):",
                       *(f"    {d.kind} ({', '.join(d.hosts)})" for d in found)]
        return Report(diagnostics=found, console=console)


__all__ = ["Ask", "RendezvousCheck", "check", "cohort", "expected_processes", "load"]
