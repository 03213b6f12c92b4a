"""Supervisor: run a planned job on a backend, watch every host, and report as SageMaker does.

Policy plus mechanism, as torch elastic's agent: :func:`decide` is the whole policy (a pure
function of what the hosts did, the clock and the requests to stop or restart), and
:class:`_JobRun` is a short loop that observes the backend, asks :func:`decide`, and acts. Faults,
diagnostics and warnings are :class:`~emulator.observers.Observer` values, so every policy can be
tested against a fake backend and a fake clock in milliseconds.

Statuses and secondary statuses follow DescribeTrainingJob (Starting → Downloading → Training →
Uploading → Completed/Failed; Stopping → Stopped/MaxRuntimeExceeded; Interrupted on spot).
All-or-nothing watching: the job completes when every host exited 0 and fails as soon as any host
exits non-zero — the other hosts are then stopped (peers stuck in a gloo collective do not wait for
their own timeout). ``MaxRuntimeInSeconds`` and stop requests end the job as SageMaker does:
SIGTERM to each host's PID 1, ``stop_grace`` seconds (SageMaker: 120), then SIGKILL. Ctrl-C (and
SIGTERM, which the CLI turns into the same exception) stops the hosts, writes ``job.json`` with
``Stopped`` and re-raises. Teardown runs in ``finally``.
"""

from __future__ import annotations

import enum
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO, TypeVar

from .backends import DEFAULT_BACKEND, choose, get_backend, jobenv, materialise
from .backends.base import Backend, JobHandle, LaunchSpec, SubnetTaken, diag_folder
from .console import LogTailer, display_log, paint
from .description import LAUNCH_SPEC_FILE, FirstFailure, describe, failure_reason
from .errors import EmulatorError
from .inhost import protocol as P
from .job import deviations
from .job import plan as planning
from .job.archives import build_archive
from .job.request import JobRequest
from .job.result import FAILURE_REASON_LIMIT, Diagnostic, HostOutcome, JobResult, Transition, write_description
from .kept import records as kept
from .observers import AttemptContext, Event, FinishContext, Observer, Report, StopReason
from .progress import watch_pip_log
from .summary import write_summary

#: Grace for hosts stopped because another host failed, or on Ctrl-C.
FAIL_FAST_GRACE = 2.0
POLL_INTERVAL = 0.05
#: How often ``start`` is retried when a concurrent job takes the spec's subnet first.
START_TRIES = 5
T = TypeVar("T")

MESSAGES = {
    "Starting": "Preparing the instances for training",
    "Downloading": "Downloading the training image",
    "Training": "Training image download completed. Training in progress.",
    "Uploading": "Uploading generated training model",
    "Completed": "Training job completed",
    "Failed": "Training job failed",
    "Stopping": "Stopping the training job",
    "Stopped": "Training job stopped",
}
# MaxRuntimeExceeded and Interrupted have no known StatusMessage text: reported without one.


class Outcome(enum.Enum):
    """How one attempt (one start of the job's hosts) ended: (TrainingJobStatus, SecondaryStatus)."""

    COMPLETED = ("Completed", "Completed")
    FAILED = ("Failed", "Failed")
    STOPPED = ("Stopped", "Stopped")
    MAX_RUNTIME = ("Stopped", "MaxRuntimeExceeded")
    INTERRUPTED = ("InProgress", "Interrupted")  # spot: the job starts again

    @property
    def status(self) -> str:
        return self.value[0]

    @property
    def secondary(self) -> str:
        return self.value[1]


#: Why hosts that still run are stopped, per outcome.
STOP_REASONS = {Outcome.FAILED: StopReason.FAIL_FAST, Outcome.STOPPED: StopReason.STOP_REQUEST,
                Outcome.MAX_RUNTIME: StopReason.MAX_RUNTIME, Outcome.INTERRUPTED: StopReason.SPOT}


@dataclass(frozen=True)
class AttemptResult:
    """How one start of the job's hosts ended."""

    outcome: Outcome
    hosts: tuple[HostOutcome, ...]
    first_failure: FirstFailure | None
    training_seconds: float
    runner: str | None
    interrupted: BaseException | None = None  # KeyboardInterrupt (Ctrl-C/SIGTERM) to re-raise


def decide(exits: Mapping[str, P.HostExit], host_count: int, *, now: float, deadline: float,
           stop_requested: bool, restart_requested: bool, failure_requested: bool = False) -> Outcome | None:
    """The supervisor's policy: how the attempt ends now, or None to keep watching.

    A failed host, or an observer's failure request (a rendezvous error), fails the job at once;
    every host exited 0 completes it; then a restart request (spot), a stop request and the
    deadline (MaxRuntimeInSeconds) stop it, in that order.
    """
    if any(not e.ok for e in exits.values()) or failure_requested:
        return Outcome.FAILED
    if len(exits) == host_count:
        return Outcome.COMPLETED
    if restart_requested:
        return Outcome.INTERRUPTED
    if stop_requested:
        return Outcome.STOPPED
    if now >= deadline:
        return Outcome.MAX_RUNTIME
    return None


class Clock(Protocol):
    """Time as the supervisor sees it (tests pass a fake one)."""

    def monotonic(self) -> float: ...

    def time(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clocks."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass
class _Transitions:
    clock: Clock
    transitions: list[Transition] = field(default_factory=list)

    def enter(self, status: str) -> Event:
        now = self.clock.time()
        if self.transitions:
            last = self.transitions[-1]
            self.transitions[-1] = Transition(last.status, last.start, now, last.message)
        self.transitions.append(Transition(status, now, None, MESSAGES.get(status)))
        return Event(now, "status", None, status)

    def close(self) -> None:
        last = self.transitions[-1]
        self.transitions[-1] = Transition(last.status, last.start, last.start, last.message)


def launch_plan(request: JobRequest, backend: Backend, *, caller_env: Mapping[str, str],
                job_id: str, scratch: Path, python: str | None = None) -> tuple[planning.JobPlan, LaunchSpec]:
    """The plan and launch spec ``backend`` runs for ``request`` (``run`` and ``plan`` both use
    this). ``python``: the job environment's interpreter (default: the backend's prediction)."""
    runtime = backend.runtime(python=python or backend.job_python(request), request=request)
    job_plan = planning.build(request, runtime=runtime, caller_env=caller_env, num_cpus=os.cpu_count() or 1)
    spec = backend.launch_spec(job_plan, job_id=job_id, scratch=scratch, logs=request.job_dir / "logs")
    return job_plan, spec


def default_observers(request: JobRequest, faults: Sequence[Any]) -> list[Observer]:
    """Faults (when any), topology diagnostics, rendezvous checks, toolkit-quirk warnings, stack capture
    at stop, collectives out of step, quiet failures, deaths at interpreter exit, the first rank to
    die, the metric definitions' values (when any), and the timeline (last: it draws every event)."""
    from .diagnostics.collectives import CollectiveCheck
    from .diagnostics.exitdeaths import ExitDeaths
    from .diagnostics.faults import FaultObserver
    from .diagnostics.firstdeath import FirstDeath
    from .diagnostics.gpu_memory import GpuMemoryReport
    from .diagnostics.metrics import MetricsObserver
    from .diagnostics.quiet import QuietFailures
    from .diagnostics.quirks import QuirkObserver
    from .diagnostics.rendezvous import RendezvousCheck
    from .diagnostics.smddp_report import SmddpNotes
    from .diagnostics.stacks import StackCapture
    from .diagnostics.timeline import Timeline
    from .diagnostics.topology import TopologyObserver

    return [*([FaultObserver(faults)] if faults else []), TopologyObserver(),
            RendezvousCheck(wait=request.wait_on_rendezvous_errors), QuirkObserver(request.hyperparameters),
            StackCapture(), CollectiveCheck(), QuietFailures(), ExitDeaths(), FirstDeath(), SmddpNotes(request),
            GpuMemoryReport(),
            *([MetricsObserver(request.metric_definitions)] if request.metric_definitions else []),
            Timeline(request.job_name, png=request.speedups().timeline_png)]


class _JobRun:
    """One job from request to result; a spot interruption makes it start its hosts again."""

    def __init__(self, request: JobRequest, backend: Backend, *, stream: TextIO, echo: bool,
                 stop_grace: float, keep_hosts: bool, observers: Sequence[Observer],
                 stop: threading.Event, clock: Clock, caller_env: Mapping[str, str]) -> None:
        self.request = request
        self.be = backend
        self.stream = stream
        self.echo = echo
        self.stop_grace = stop_grace
        self.keep_hosts = keep_hosts
        self.observers = list(observers)
        self.stop = stop
        self.clock = clock
        self.caller_env = caller_env
        self.transitions = _Transitions(clock)
        self.events: list[Event] = []
        self.job_dir = request.job_dir
        self.logs = self.job_dir / "logs"
        self.scratch = Path(tempfile.mkdtemp(prefix=P.scratch_prefix(request.job_name)))
        kept.claim(self.scratch, job_dir=self.job_dir, job_name=request.job_name, backend=backend.name)
        self.diag_dir = diag_folder(self.scratch / "backend-0")
        self.deadline = 0.0
        self.observer_errors: list[Diagnostic] = []
        self._failed_hooks: set[tuple[int, str]] = set()  # (observer, hook) already recorded
        self.kept: kept.KeptJob | None = None  # --keep-hosts: the hosts handed off (emulator/kept/records.py)
        #: The last attempt's plan and the launch spec that ran (what ``job.json`` reports).
        self.job_plan: planning.JobPlan | None = None
        self.spec: LaunchSpec | None = None
        #: What the backend's ``prepare`` warned about, and the framework that ran (the spec's).
        self.prepare_warnings: list[str] = []
        self.framework: dict[str, Any] | None = None
        #: An observer's FailureReason for a job it asked to fail (a rendezvous error).
        self.requested_failure: str | None = None

    # -- observers: one error policy ------------------------------------------------------------
    def _each(self, hook: str, call: Callable[[Observer], T]) -> list[T]:
        """``call(observer)`` for every observer, in order; what each returned. An observer that
        raises is skipped for this call and recorded as an ``observer-error`` diagnostic (once
        per observer and hook: a hook called per poll or per line would repeat it); it never
        breaks the job. ``hook``: the hook's name, for the diagnostic."""
        out: list[T] = []
        for o in self.observers:
            try:
                out.append(call(o))
            except Exception as exc:  # an observer must never break the job
                key = (id(o), hook)
                if key not in self._failed_hooks:
                    self._failed_hooks.add(key)
                    self.observer_errors.append(Diagnostic("observer-error", f"{type(o).__name__}.{hook}: {exc!r}"))
        return out

    def _events(self, hook: str, call: Callable[[Observer], Sequence[Event]]) -> None:
        """A hook that returns events: keep them for ``job.json`` and the timeline."""
        for events in self._each(hook, call):
            self.events.extend(events or ())

    def _tick(self, now: float) -> None:
        self._events("on_tick", lambda o: o.on_tick(now))

    def _on_line(self, host: str, line: str) -> None:
        self._each("on_line", lambda o: o.on_line(host, line))

    def _enter(self, status: str) -> None:
        self.events.append(self.transitions.enter(status))

    # -- one attempt ---------------------------------------------------------------------------
    def _plan(self, python: str | None, scratch: Path) -> tuple[planning.JobPlan, LaunchSpec]:
        return launch_plan(self.request, self.be, caller_env=self.caller_env, python=python, scratch=scratch,
                           job_id=f"{self.request.job_name[:40]}-{uuid.uuid4().hex[:8]}")

    def attempt(self, number: int) -> AttemptResult:
        request, be, clock = self.request, self.be, self.clock
        scratch = self.scratch / f"backend-{number}"
        if number > 0:
            self._enter("Starting")
            shutil.rmtree(self.job_dir / "hosts", ignore_errors=True)
        handle: JobHandle | None = None
        tailer: LogTailer | None = None
        job_plan: planning.JobPlan | None = None
        spec: LaunchSpec | None = None
        exits: dict[str, tuple[P.HostExit, float]] = {}
        first: FirstFailure | None = None
        outcome = Outcome.FAILED
        interrupted: BaseException | None = None
        started = clock.monotonic()
        try:
            # pip's minutes (framework layers once per machine, requirements.txt once per job
            # environment) say how far they are; a cached environment says nothing.
            with watch_pip_log(self.logs / "jobenv.log", "making the job's environment",
                               self.stream if self.echo else sys.stderr):
                python = be.prepare_python(request, scratch=scratch, log=self.logs / "jobenv.log",
                                           env=planning.common_env(request, be.runtime(), self.caller_env))
            if number == 0:  # once per job (not again at a spot restart)
                from .preflight import package_warnings

                world = be.job_world(request)
                notes = [*(jobenv.replacement_notes(python) if python is not None else []),
                         *(package_warnings(request, world) if world is not None else [])]
                for note in notes:
                    self._say(f"warning: {note}")
                    self.prepare_warnings.append(note)
            self._enter("Downloading")
            job_plan, spec = self._plan(python, scratch)
            self.framework = spec.options.get("framework")
            materialise.write_all(job_plan)
            for h in spec.hosts:  # the raw log (the backend's) and the display log (the tailer's)
                h.log_path.touch()
                display_log(h.log_path).touch()
            tailer = LogTailer({h.name: h.log_path for h in spec.hosts}, stream=self.stream, echo=self.echo,
                               sink=self._on_line,
                               out={h.name: display_log(h.log_path) for h in spec.hosts
                                    if display_log(h.log_path) != h.log_path}).start()
            self._enter("Training")
            self._say(f"{request.job_name}: starting {len(spec.hosts)} host(s) on the {be.name} backend, "
                      f"runner {job_plan.runner}")
            if choose.describe(be):  # which backend and why (emulator/backends/choose.py)
                self._say(f"backend: {choose.describe(be)['BackendReason']}")
            for tries in range(START_TRIES):
                try:
                    handle = be.start(spec)
                    break
                except SubnetTaken:  # a concurrent job took the subnet first: plan the network again
                    if tries == START_TRIES - 1:
                        raise EmulatorError(f"the job network could not be created in {START_TRIES} tries "
                                            f"(concurrent jobs kept taking {spec.subnet})") from None
                    job_plan, spec = self._plan(python, scratch)
            assert handle is not None
            (self.job_dir / LAUNCH_SPEC_FILE).write_text(json.dumps(spec.to_dict(), indent=1, default=str))
            self.job_plan, self.spec = job_plan, spec
            started = clock.monotonic()
            self.events += [Event(clock.time(), "host-start", h.name) for h in spec.hosts]
            self.diag_dir = spec.diag_dir
            from .diagnostics.rendezvous import expected_processes

            ctx = AttemptContext(number, handle, tuple(h.name for h in spec.hosts), self.diag_dir, started,
                                 clock.time(), say=self._say,
                                 expected_processes=expected_processes(h.launcher for h in job_plan.hosts))
            self._each("on_start", lambda o: o.on_start(ctx))
            outcome, first = self._watch(handle, exits)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM through the CLI
            interrupted, outcome = exc, Outcome.STOPPED
            self._enter("Stopping")
            self._say("interrupted: stopping every host")
            if handle is not None:
                self._events("before_stop", lambda o: o.before_stop(StopReason.INTERRUPT))
                self._keep(handle, StopReason.INTERRUPT)
        finally:
            now = clock.monotonic()
            self._events("on_end", lambda o: o.on_end(now))
            if handle is not None:
                handle.teardown(FAIL_FAST_GRACE)
            if tailer is not None:
                tailer.stop()
        hosts = []
        for h in spec.hosts if spec is not None else ():
            done = exits.get(h.name)
            ended = handle.hosts[h.name].poll() if handle is not None else None
            failure = materialise.host_root(self.job_dir, h.name) / "output" / "failure"
            hosts.append(HostOutcome(h.name, done[0] if done else ended, display_log(h.log_path),
                                     done[1] if done else (clock.time() if ended else None),
                                     failure.read_text(errors="replace") if failure.exists() else None))
        if job_plan is not None:
            materialise.sync_checkpoints(job_plan, self.job_dir)
        return AttemptResult(outcome, tuple(hosts), first, clock.monotonic() - started,
                             job_plan.runner if job_plan else None, interrupted)

    def _watch(self, handle: JobHandle,
               exits: dict[str, tuple[P.HostExit, float]]) -> tuple[Outcome, FirstFailure | None]:
        """Monitor, decide, act: until :func:`decide` says how the attempt ends."""
        clock, first = self.clock, None
        while True:
            for name, host in handle.hosts.items():
                ended = host.poll() if name not in exits else None
                if ended is not None:
                    exits[name] = (ended, clock.time())
                    self.events.append(Event(clock.time(), "host-exit", name, ended.describe()))
                    if not ended.ok and first is None:
                        first = FirstFailure(name, ended, clock.time())
                        self.events.append(Event(first.time, "first-failure", name, ended.describe()))
            self._tick(clock.monotonic())
            if self.requested_failure is None:
                self.requested_failure = next(
                    (r for r in self._each("failure_requested", lambda o: o.failure_requested()) if r), None)
            restart = any(self._each("restart_requested", lambda o: o.restart_requested()))
            outcome = decide({n: e for n, (e, _) in exits.items()}, len(handle.hosts), now=clock.monotonic(),
                             deadline=self.deadline, stop_requested=self.stop.is_set(),
                             restart_requested=restart,
                             failure_requested=self.requested_failure is not None)
            if outcome is None:
                clock.sleep(POLL_INTERVAL)
                continue
            if outcome is not Outcome.COMPLETED:
                self._stop_hosts(handle, outcome, exits)
            return outcome, first

    def _stop_hosts(self, handle: JobHandle, outcome: Outcome, exits: Mapping[str, Any]) -> None:
        """Act on an outcome that leaves hosts running: say why, let observers look, stop them."""
        grace = FAIL_FAST_GRACE if outcome is Outcome.FAILED else self.stop_grace
        if outcome is Outcome.INTERRUPTED:
            self._enter("Interrupted")
            self._say("spot interruption: stopping every host")
        stopping = "hosts that still run are kept (--keep-hosts)" if self.keep_hosts else \
            f"SIGTERM, then SIGKILL after {grace:g} s"
        if outcome is Outcome.STOPPED:
            self._enter("Stopping")
            self._say(f"stop requested: {stopping}")
        elif outcome is Outcome.MAX_RUNTIME:
            self._enter("Stopping")
            self._say(f"MaxRuntimeInSeconds ({self.request.max_runtime_seconds}) exceeded: {stopping}")
        reason = STOP_REASONS[outcome]
        if outcome is Outcome.FAILED and self.requested_failure is not None and first_failed(exits) is None:
            reason = StopReason.DIAGNOSIS
        if any(name not in exits for name in handle.hosts):
            self.events.append(Event(self.clock.time(), "stop", None, reason.value))
            self._events("before_stop", lambda o: o.before_stop(reason))
            if outcome is not Outcome.INTERRUPTED:
                self._keep(handle, reason)
        handle.teardown(grace)

    def _keep(self, handle: JobHandle, reason: StopReason) -> None:
        """``--keep-hosts``: freeze and hand off the hosts that still run (teardown then spares them)."""
        if self.keep_hosts and self.kept is None:
            self.kept = kept.keep(handle, job_dir=self.job_dir, scratch=self.scratch, job_name=self.request.job_name,
                                  backend=self.be.name, reason=reason.value, diag_dir=self.diag_dir)
            if self.kept is not None:
                self._say(f"kept for post-mortem, frozen: {', '.join(self.kept.hosts)}")

    # -- the whole job ---------------------------------------------------------------------------
    def run(self) -> JobResult:
        request, clock = self.request, self.clock
        created = clock.time()
        self._enter("Starting")
        self.job_dir.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        self.deadline = clock.monotonic() + request.max_runtime_seconds
        attempts: list[AttemptResult] = []
        reports: list[Report] = []
        try:
            while True:
                attempts.append(self.attempt(len(attempts)))
                if attempts[-1].outcome is not Outcome.INTERRUPTED or attempts[-1].interrupted:
                    break
                self.events.append(Event(clock.time(), "restart"))
            last = attempts[-1]
            hosts = kept.mark(last.hosts or next((a.hosts for a in reversed(attempts) if a.hosts), ()), self.kept)
            finish = FinishContext(self.job_dir, self.diag_dir, last.outcome.status, last.outcome.secondary,
                                   tuple(hosts), tuple(self.events),
                                   last.first_failure.host if last.first_failure else None)
            reports += self._each("report", lambda o: o.report(finish))  # before the scratch tree (rank records) goes
        finally:
            if self.kept is None:  # a kept job's hosts still use it; `reap` removes it
                shutil.rmtree(self.scratch, ignore_errors=True)
        self._enter("Uploading")
        roots = [materialise.host_root(self.job_dir, h.name) for h in hosts]
        out_dir = self.job_dir / "output"
        model = build_archive(out_dir / "model.tar.gz", [r / "model" for r in roots], always=True)
        output = build_archive(out_dir / "output.tar.gz", [r / "output" / "data" for r in roots], always=False)
        reason = None
        if last.outcome is Outcome.FAILED:
            reason = (self.requested_failure[:FAILURE_REASON_LIMIT]
                      if self.requested_failure is not None and last.first_failure is None
                      else failure_reason(hosts, last.first_failure))
        self._enter(last.outcome.secondary)
        self.transitions.close()
        merged = _merge(reports)
        spot = sum(a.outcome is Outcome.INTERRUPTED for a in attempts)
        image = self.spec.image if self.spec is not None else None  # what ran (a DLC URI runs the emulator's image)
        observer_deviations = [d for ds in self._each("deviations", lambda o: list(o.deviations())) for d in ds]
        emulator = {
            "Image": image,
            "SpotInterruptions": spot,
            "Faults": [],
            "Warnings": [*self.prepare_warnings, *merged.warnings],
            "Deviations": [*deviations.for_request(request, self.framework, fast_start=self.be.fast_start),
                           *observer_deviations],
            "Framework": self.framework,
            "Events": [e.to_dict() for e in sorted(self.events + merged.events, key=lambda e: e.time)],
            **merged.emulator,
            **kept.describe(self.kept),
            **choose.describe(self.be),  # Emulator.BackendReason (emulator/backends/choose.py)
        }
        diagnostics = [*merged.diagnostics, *self.observer_errors]  # with the deviations' errors
        description = describe(
            request, transitions=self.transitions.transitions, created=created, end=clock.time(),
            status=last.outcome.status, secondary_status=last.outcome.secondary, runner=last.runner, hosts=hosts,
            first_failure=last.first_failure, diagnostics=diagnostics, backend=self.be.name, failure=reason,
            # SageMaker echoes the requested image; when none was, the image that ran (or the backend's word)
            training_image=image or (self.job_plan.runtime.training_image if self.job_plan is not None else None),
            # spot: billed for training time only, across the attempts
            billable_seconds=sum(a.training_seconds for a in attempts) if spot else None,
            emulator=emulator, fields=merged.description)
        write_description(self.job_dir / "job.json", description)
        if not self.keep_hosts:
            shutil.rmtree(self.job_dir / "hosts", ignore_errors=True)
        result = JobResult(job_name=request.job_name, status=last.outcome.status,
                           secondary_status=last.outcome.secondary, failure_reason=reason,
                           job_dir=self.job_dir, hosts=tuple(hosts), description=description,
                           model_artifact=model, output_artifact=output, diagnostics=tuple(diagnostics),
                           warnings=(*self.prepare_warnings, *merged.warnings),
                           first_failure=last.first_failure.host if last.first_failure else None)
        if self.echo:
            write_summary(result, self.stream, merged.console)
        if self.echo and self.kept is not None:  # last: what to do next
            self.stream.write("\n".join(kept.console(self.kept)) + "\n")
        if last.interrupted is not None:
            raise last.interrupted
        return result

    def _say(self, text: str) -> None:
        if self.echo:
            self.stream.write(paint(f"[emulator] {text}", "1", self.stream) + "\n")
            self.stream.flush()


def run(request: JobRequest, *, backend: str | Backend = DEFAULT_BACKEND, stream: TextIO | None = None,
        echo: bool = True, stop_grace: float = P.STOP_GRACE, keep_hosts: bool = False,
        faults: Sequence[Any] = (), stop: threading.Event | None = None,
        observers: Sequence[Observer] | None = None, clock: Clock | None = None,
        caller_env: Mapping[str, str] | None = None) -> JobResult:
    """Run ``request`` to the end and return its :class:`JobResult`. Writes ``job.json``.

    Setting ``stop`` (from another thread) stops the job as StopTrainingJob does: SIGTERM,
    ``stop_grace``, SIGKILL, status ``Stopped``. ``faults`` are :mod:`emulator.diagnostics.faults` values (or
    their CLI strings) injected while the job runs; ``observers`` replace the default ones
    (:func:`default_observers`; the faults' observer is always added when there are faults).
    ``caller_env`` (default: this process's environment) is where ``pass_env`` names and, when
    forwarded, AWS credentials are read. Raises :class:`KeyboardInterrupt` after tearing
    everything down and writing ``job.json`` (Stopped) when interrupted.
    """
    from .diagnostics.faults import FaultObserver

    be = get_backend(backend) if isinstance(backend, str) else backend
    if faults:
        from .diagnostics import faults as fault_specs

        faults = fault_specs.parse_all(f for f in faults if isinstance(f, str)) + tuple(
            f for f in faults if not isinstance(f, str))
        fault_specs.check(faults, request.hosts)
    be.check(request=request)
    from .preflight import check as preflight

    notes = preflight(request, be)  # warnings: said before anything starts
    stream = stream or sys.stdout
    for note in notes:
        _progress(stream if echo else sys.stderr)(f"warning: {note}")
    # Before anything of the job exists: refusals, and a framework image or wheelhouse built once.
    prepared = be.prepare(request, say=_progress(stream if echo else sys.stderr))
    job = _JobRun(request, be, stream=stream, echo=echo, stop_grace=stop_grace,
                  keep_hosts=keep_hosts,
                  observers=default_observers(request, faults) if observers is None else
                  [*([FaultObserver(faults)] if faults else []), *observers],
                  stop=stop or threading.Event(), clock=clock or SystemClock(),
                  caller_env=dict(os.environ) if caller_env is None else caller_env)
    job.prepare_warnings = [*notes, *prepared]
    return job.run()


def _progress(out: TextIO) -> Callable[[str], None]:
    """Progress lines of a backend's preparation (e.g. a framework image's first build)."""
    def say(text: str) -> None:
        out.write(paint(f"[emulator] {text}", "1", out) + "\n")
        out.flush()
    return say


def first_failed(exits: Mapping[str, Any]) -> str | None:
    """The first host (in ``exits``' order) that exited non-zero, or None."""
    return next((name for name, (e, _) in exits.items() if not e.ok), None)


def _merge(reports: Sequence[Report]) -> Report:
    merged = Report()
    for r in reports:
        merged.diagnostics += r.diagnostics
        merged.warnings += r.warnings
        merged.emulator.update(r.emulator)
        merged.console += r.console
        merged.events += r.events
        merged.description.update(r.description)
    return merged
