"""Supervisor: run a planned job on a backend, watch every host, and report as SageMaker does.

Statuses and secondary statuses follow DescribeTrainingJob (Starting → Downloading → Training →
Uploading → Completed/Failed; Stopping → Stopped/MaxRuntimeExceeded). All-or-nothing watching:
the job completes when every host exited 0 and fails as soon as any host exits non-zero — the
other hosts are then stopped whole (peers stuck in a gloo collective do not wait for their own
timeout). ``MaxRuntimeInSeconds`` ends the job as SageMaker does: SIGTERM to each host's PID 1,
``stop_grace`` seconds (SageMaker: 120), then SIGKILL. Teardown runs in ``finally``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from . import jobenv, materialise
from . import plan as planning
from .archives import build_archive
from .backends import HostSpec, JobSpec, get_backend
from .backends.base import Backend, JobHandle, Mount
from .console import LogTailer, paint, table, tail
from .observers import AttemptContext, Event, FinishContext, Observer, Report, StopReason  # debugging (issue 13)
from .request import JobRequest
from .result import FAILURE_REASON_LIMIT, HostOutcome, JobResult, Transition, iso, write_description

#: SageMaker's grace between SIGTERM and SIGKILL when a job is stopped.
SAGEMAKER_STOP_GRACE = 120.0
#: Grace for hosts stopped because another host failed.
FAIL_FAST_GRACE = 2.0
POLL_INTERVAL = 0.05
#: Where ranks write their diagnostics records inside a host.
DIAG_TARGET = "/tmp/.sm-emulator-diagnostics"
FAILED_LOG_LINES = 20

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


@dataclass
class _Clock:
    transitions: list[Transition]

    def enter(self, status: str, message: str | None = None) -> None:
        now = time.time()
        if self.transitions:
            last = self.transitions[-1]
            self.transitions[-1] = Transition(last.status, last.start, now, last.message)
        self.transitions.append(Transition(status, now, None, message or MESSAGES.get(status)))

    def close(self) -> None:
        last = self.transitions[-1]
        self.transitions[-1] = Transition(last.status, last.start, last.start, last.message)


def plan_for(request: JobRequest, backend: Backend, *, python: str | None = None,
             diag_dir: str | None = None) -> planning.JobPlan:
    """The plan this backend would run (used by ``run`` and by ``python -m emulator plan``)."""
    extra_path: list[str] = []
    if backend.name == "process":
        python = python or sys.executable
        command = [python, str(jobenv.train_script())]
        # As in a DLC, the interpreter's scripts (torchrun, mpirun wrappers) are on PATH.
        extra_path = list(dict.fromkeys([str(Path(python).parent), str(jobenv.train_script().parent)]))
    else:
        python = python or "python3"
        command = backend.train_command()
    gethostname_so = None
    if backend.name == "process":
        spec = importlib.util.find_spec("gethostname")  # the toolkit's LD_PRELOAD library
        gethostname_so = spec.origin if spec is not None else None
    return planning.build(request, base_env=backend.base_env(), inhost_root=backend.inhost_root,
                          train_command=command, python=python, num_cpus=os.cpu_count() or 1,
                          diag_dir=diag_dir, aws_credentials=dict(os.environ), extra_path=extra_path,
                          gethostname_so=gethostname_so)


@dataclass
class _Attempt:
    """How one start of the job's hosts ended."""

    outcome: str  # Completed | Failed | Stopped | Interrupted
    secondary: str
    hosts: list[HostOutcome]
    first: tuple[str, int, float] | None
    runner: str
    events: list[dict[str, Any]]
    training_seconds: float


class _JobRun:
    """One job from request to result; a spot interruption makes it start its hosts again."""

    def __init__(self, request: JobRequest, backend: Backend, *, stream: TextIO, echo: bool,
                 stop_grace: float, keep_hosts: bool, faults: Sequence[Any],
                 stop: threading.Event | None = None) -> None:
        self.request = request
        self.be = backend
        self.stream = stream
        self.echo = echo
        self.stop_grace = stop_grace
        self.keep_hosts = keep_hosts
        self.faults = list(faults)
        self.stop = stop or threading.Event()
        self.clock = _Clock([])
        self.job_dir = request.job_dir
        self.logs = self.job_dir / "logs"
        self.scratch = Path(tempfile.mkdtemp(prefix=f"sm-emulator-{request.job_name[:20]}-"))
        (self.scratch / "owner").write_text(f"{os.getpid()}\n")
        self.diag_dir = self.scratch / "diagnostics"
        self.diag_dir.mkdir()
        self.injector: Any = None
        self.deadline = 0.0
        self.observers: list[Observer] = debug_observers(request.job_name)  # debugging (issue 13)
        self.events: list[Event] = []  # debugging (issue 13)

    # -- one attempt ------------------------------------------------------------------------
    def attempt(self, number: int) -> _Attempt:
        request, be = self.request, self.be
        if number > 0:
            self.clock.enter("Starting")
            shutil.rmtree(self.job_dir / "hosts", ignore_errors=True)
        python, _ready = jobenv.prepare(request.source_dir, self.job_dir / "hosts", self.logs / "jobenv.log")
        job_plan = plan_for(request, be, python=python if be.name == "process" else None, diag_dir=DIAG_TARGET)
        self.clock.enter("Downloading")
        trees = materialise.write_all(job_plan, self.job_dir)
        log_paths = {h.name: self.logs / f"{h.name}.log" for h in job_plan.hosts}
        for p in log_paths.values():
            p.touch()
        specs = [HostSpec(name=h.name, address=h.address, opt_ml=trees[h.name][0], env=h.env,
                          command=h.command, workdir="/opt/ml/code", hosts_file=job_plan.hosts_file,
                          log_path=log_paths[h.name],
                          mounts=[*trees[h.name][1], *be.inhost_mounts(), Mount(self.diag_dir, DIAG_TARGET)],
                          image=request.image_uri, labels={"sagemaker-emulator.job": request.job_name})
                 for h in job_plan.hosts]
        job_id = f"{request.job_name[:40]}-{uuid.uuid4().hex[:8]}"
        handle: JobHandle | None = None
        tailer = LogTailer(log_paths, stream=self.stream, echo=self.echo, sink=self._on_line).start()
        exits: dict[str, tuple[int, float]] = {}
        first: tuple[str, int, float] | None = None
        events: list[dict[str, Any]] = []
        outcome, secondary = "Failed", "Failed"
        training_start = time.time()
        try:
            self.clock.enter("Training")
            _say(self.stream, f"{request.job_name}: starting {len(specs)} host(s) on the {be.name} backend, "
                 f"runner {job_plan.runner}", self.echo)
            handle = be.start(JobSpec(job_id=job_id, hosts=specs, scratch=self.scratch / f"backend-{number}"))
            self._observe_start(number, handle, [s.name for s in specs])  # debugging (issue 13)
            if self.faults:
                from .faults import FaultInjector

                self.injector = FaultInjector(self.faults, handle, time.monotonic())
            while True:
                now = time.time()
                for name, host in handle.hosts.items():
                    rc = host.poll()
                    if rc is not None and name not in exits:
                        exits[name] = (rc, now)
                        self.events.append(Event(now, "host-exit", name, f"exit {rc}"))  # debugging (issue 13)
                        if rc != 0 and first is None:
                            first = (name, rc, now)
                            self.events.append(Event(now, "first-failure", name, f"exit {rc}"))  # (issue 13)
                if first is not None:
                    outcome, secondary = "Failed", "Failed"
                    if len(exits) < len(specs):  # debugging (issue 13)
                        self._before_stop(StopReason.FAIL_FAST)
                    break
                if len(exits) == len(specs):
                    outcome, secondary = "Completed", "Completed"
                    break
                if self.injector is not None:
                    events += [_event_dict(e) for e in self.injector.tick(time.monotonic())]
                    if self.injector.spot_requested():
                        _say(self.stream, "spot interruption: stopping every host", self.echo)
                        self._before_stop(StopReason.SPOT)  # debugging (issue 13)
                        self.clock.enter("Interrupted")
                        handle.teardown(self.stop_grace)
                        outcome, secondary = "Interrupted", "Interrupted"
                        break
                if self.stop.is_set():
                    self._before_stop(StopReason.STOP_REQUEST)  # debugging (issue 13)
                    self.clock.enter("Stopping")
                    _say(self.stream, f"stop requested: SIGTERM, then SIGKILL after {self.stop_grace:g} s", self.echo)
                    handle.teardown(self.stop_grace)
                    outcome, secondary = "Stopped", "Stopped"
                    break
                if time.monotonic() >= self.deadline:
                    self._before_stop(StopReason.MAX_RUNTIME)  # debugging (issue 13)
                    self.clock.enter("Stopping")
                    _say(self.stream, f"MaxRuntimeInSeconds ({request.max_runtime_seconds}) exceeded: "
                         f"SIGTERM, then SIGKILL after {self.stop_grace:g} s", self.echo)
                    handle.teardown(self.stop_grace)
                    outcome, secondary = "Stopped", "MaxRuntimeExceeded"
                    break
                time.sleep(POLL_INTERVAL)
        finally:
            if self.injector is not None:  # thaw frozen hosts; faults not fired carry over a restart
                events += [_event_dict(e) for e in self.injector.close(time.monotonic())]
                self.faults = self.injector.pending()
                self.injector = None
            if handle is not None:
                handle.teardown(FAIL_FAST_GRACE)
            tailer.stop()
            for o in self.observers:  # debugging (issue 13)
                _safely(o.on_end, time.monotonic())
        hosts = []
        for h in job_plan.hosts:
            rc = handle.hosts[h.name].poll() if handle is not None else None
            failure = materialise.host_root(self.job_dir, h.name) / "output" / "failure"
            hosts.append(HostOutcome(h.name, rc, log_paths[h.name], exits.get(h.name, (0, None))[1],
                                     failure.read_text(errors="replace") if failure.exists() else None))
        materialise.sync_checkpoints(job_plan, self.job_dir)
        return _Attempt(outcome, secondary, hosts, first, job_plan.runner, events, time.time() - training_start)

    def _on_line(self, host: str, line: str) -> None:
        injector = self.injector
        if injector is not None:
            injector.on_line(host, line)
        for o in self.observers:  # debugging (issue 13)
            _safely(o.on_line, host, line)

    # -- debugging observers (issue 13): a stand-in for the lead's observer calls ---------------
    def _observe_start(self, number: int, handle: JobHandle, hosts: list[str]) -> None:
        now = time.time()
        self.events += [Event(now, "host-start", h) for h in hosts]
        ctx = AttemptContext(number, handle, tuple(hosts), self.diag_dir, time.monotonic(), now)
        for o in self.observers:
            _safely(o.on_start, ctx)

    def _before_stop(self, reason: StopReason) -> None:
        self.events.append(Event(time.time(), "stop", None, reason.value))
        for o in self.observers:
            self.events += list(_safely(o.before_stop, reason) or ())

    def _observe_finish(self, attempts: list[_Attempt]) -> Report:
        last = attempts[-1]
        hosts = last.hosts or (attempts[-2].hosts if len(attempts) > 1 else [])
        faults = [Event(float(e.get("Wall", 0)), "fault", e.get("Host"), str(e.get("Action", "")))
                  for a in attempts for e in a.events if isinstance(e, dict) and "Wall" in e]
        finish = FinishContext(self.job_dir, self.diag_dir, last.outcome, last.secondary, tuple(hosts),
                               tuple(sorted(self.events + faults, key=lambda e: e.time)),
                               last.first[0] if last.first else None)
        merged = Report()
        for o in self.observers:
            part = _safely(o.report, finish)
            if part is None:
                continue
            merged.diagnostics += part.diagnostics
            merged.warnings += part.warnings
            merged.emulator.update(part.emulator)
            merged.console += part.console
        return merged

    # -- the whole job ------------------------------------------------------------------------
    def run(self) -> JobResult:
        request = self.request
        created = time.time()
        self.clock.enter("Starting")
        self.job_dir.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        self.deadline = time.monotonic() + request.max_runtime_seconds
        attempts: list[_Attempt] = []
        interrupted = False
        diagnostics: list[Any] = []
        observed = Report()  # debugging (issue 13)
        try:
            while True:
                attempts.append(self.attempt(len(attempts)))
                if attempts[-1].outcome != "Interrupted":
                    break
            diagnostics = _diagnostics(self.diag_dir)  # before the scratch tree goes
            observed = self._observe_finish(attempts)  # debugging (issue 13)
            diagnostics += observed.diagnostics  # debugging (issue 13)
        except KeyboardInterrupt:
            interrupted = True
            self.clock.enter("Stopping")
            attempts.append(_Attempt("Stopped", "Stopped", [], None, "", [], 0.0))
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)
            if not self.keep_hosts and not attempts:
                shutil.rmtree(self.job_dir / "hosts", ignore_errors=True)
        last = attempts[-1]
        hosts = last.hosts or (attempts[-2].hosts if len(attempts) > 1 else [])
        self.clock.enter("Uploading")
        roots = [materialise.host_root(self.job_dir, h.name) for h in hosts]
        out_dir = self.job_dir / "output"
        model = build_archive(out_dir / "model.tar.gz", [r / "model" for r in roots], always=True)
        output = build_archive(out_dir / "output.tar.gz", [r / "output" / "data" for r in roots], always=False)
        failure_reason = _failure_reason(hosts, last.first) if last.outcome == "Failed" else None
        warnings = _quirk_warnings(hosts, request) + observed.warnings  # debugging (issue 13): + observed
        self.clock.enter(last.secondary)
        self.clock.close()
        end = time.time()
        description = _describe(request, self.clock, created, end, last.outcome, last.secondary, failure_reason,
                                model, hosts, last.first, diagnostics, self.be.name, last.runner or None)
        description["BillableTimeInSeconds"] = max(1, round(sum(a.training_seconds for a in attempts)))
        description["Emulator"].update({
            "SpotInterruptions": sum(a.outcome == "Interrupted" for a in attempts),
            "Faults": [e for a in attempts for e in a.events],
            "Warnings": warnings,
            "Deviations": [text for on, text in ((request.short_toolkit_sleeps, "toolkit MPI sleeps capped at 1 s"),
                                                 (request.fast_start, "fast rank start (forked ranks)")) if on],
        })
        description["Emulator"].update(observed.emulator)  # debugging (issue 13)
        write_description(self.job_dir / "job.json", description)
        if not self.keep_hosts:
            shutil.rmtree(self.job_dir / "hosts", ignore_errors=True)
        result = JobResult(job_name=request.job_name, status=last.outcome, secondary_status=last.secondary,
                           failure_reason=failure_reason, job_dir=self.job_dir, hosts=tuple(hosts),
                           description=description, model_artifact=model, output_artifact=output,
                           diagnostics=tuple(diagnostics), warnings=tuple(warnings),
                           first_failure=last.first[0] if last.first else None)
        _summary(result, self.stream, self.echo, last.first, observed.console)  # debugging (issue 13): console
        if interrupted:
            raise KeyboardInterrupt
        return result


def run(request: JobRequest, *, backend: str | Backend = "process", stream: TextIO | None = None,
        echo: bool = True, stop_grace: float = SAGEMAKER_STOP_GRACE, keep_hosts: bool = False,
        faults: Sequence[Any] = (), stop: threading.Event | None = None) -> JobResult:
    """Run ``request`` to the end and return its :class:`JobResult`. Writes ``job.json``.

    Setting ``stop`` (from another thread) stops the job as StopTrainingJob does: SIGTERM,
    ``stop_grace``, SIGKILL, status ``Stopped``.

    ``faults`` are :mod:`emulator.faults` values injected while the job runs. Raises
    :class:`KeyboardInterrupt` after tearing everything down and writing ``job.json`` (Stopped)
    when interrupted.
    """
    be = get_backend(backend) if isinstance(backend, str) else backend
    if faults:
        from . import faults as fault_specs

        faults = fault_specs.parse_all(f for f in faults if isinstance(f, str)) + tuple(
            f for f in faults if not isinstance(f, str))
        fault_specs.check(faults, request.hosts)
    be.check()
    return _JobRun(request, be, stream=stream or sys.stdout, echo=echo, stop_grace=stop_grace,
                   keep_hosts=keep_hosts, faults=faults, stop=stop).run()


# -- debugging observers (issue 13) -------------------------------------------------------------
def debug_observers(job_name: str) -> list[Observer]:
    """Stack capture, collective comparison, quiet failures and the timeline, for every job."""
    from .collectives import CollectiveCheck
    from .quiet import QuietFailures
    from .stacks import StackCapture
    from .timeline import Timeline

    return [StackCapture(), CollectiveCheck(), QuietFailures(), Timeline(job_name)]


def _safely(hook: Any, *args: Any) -> Any:
    """Call an observer's hook; an observer's error never breaks the job (it is printed)."""
    try:
        return hook(*args)
    except Exception as exc:  # observers must not break the supervisor
        print(f"[emulator] observer {getattr(hook, '__qualname__', hook)} failed: {exc!r}", file=sys.stderr)
        return None


def _event_dict(event: Any) -> dict[str, Any]:
    if isinstance(event, dict):
        return event
    if hasattr(event, "to_dict"):
        return dict(event.to_dict())
    return {"event": str(event)}


def _quirk_warnings(hosts: Sequence[HostOutcome], request: JobRequest) -> list[str]:
    try:
        from .quirks import detect
    except ImportError:
        return []
    logs = {h.name: h.log.read_text(errors="replace") if h.log.exists() else "" for h in hosts}
    return list(detect(logs, request.hyperparameters))


def _say(stream: TextIO, text: str, echo: bool) -> None:
    if echo:
        stream.write(paint(f"[emulator] {text}", "1", stream) + "\n")
        stream.flush()


def _failure_reason(hosts: Sequence[HostOutcome], first: tuple[str, int, float] | None) -> str:
    ordered = sorted(hosts, key=lambda h: (h.name != (first[0] if first else None), h.name))
    for h in ordered:
        if h.failure:
            return ("AlgorithmError: " + h.failure.strip())[:FAILURE_REASON_LIMIT]
    code = first[1] if first else 1
    # as a container's exit status: killed by signal N is 128+N (docker's convention)
    return f"AlgorithmError: Exit Code: {128 - code if code < 0 else code}"


def _diagnostics(diag_dir: Path) -> list[Any]:
    try:
        from .diagnostics import analyze
    except ImportError:
        return []
    try:
        return list(analyze(diag_dir))
    except Exception as exc:  # diagnostics must never hide the job's own result
        from .result import Diagnostic

        return [Diagnostic("diagnostics-error", f"could not analyse rank records: {exc}")]


def _describe(request: JobRequest, clock: _Clock, created: float, end: float, status: str,
              secondary: str, failure_reason: str | None, model: Path | None,
              hosts: Sequence[HostOutcome], first: tuple[str, int, float] | None,
              diagnostics: Sequence[Any], backend: str, runner: str | None) -> dict[str, Any]:
    transitions = clock.transitions
    start = next((t.start for t in transitions if t.status == "Downloading"), created)
    seconds = max(1, round(end - start))
    d: dict[str, Any] = {
        "TrainingJobName": request.job_name,
        "TrainingJobArn": request.arn,
        "TrainingJobStatus": status,
        "SecondaryStatus": secondary,
        "SecondaryStatusTransitions": [t.to_dict() for t in transitions],
        "CreationTime": iso(created),
        "TrainingStartTime": iso(start),
        "TrainingEndTime": iso(end),
        "LastModifiedTime": iso(end),
        "TrainingTimeInSeconds": seconds,
        "BillableTimeInSeconds": seconds,
        **request.to_dict(),
        "ModelArtifacts": {"S3ModelArtifacts": model.as_uri() if model else None},
    }
    d.pop("TrainingJobName")
    d = {"TrainingJobName": request.job_name, **d}
    if failure_reason:
        d["FailureReason"] = failure_reason
    d["Emulator"] = {
        "Backend": backend,
        "Runner": runner,
        "JobDir": str(request.job_dir),
        "Hosts": [{"Host": h.name, "ExitCode": h.exit_code, "How": h.how, "Log": str(h.log)} for h in hosts],
        "FirstFailure": ({"Host": first[0], "ExitCode": first[1], "Time": iso(first[2])} if first else None),
        "Diagnostics": [{"Kind": x.kind, "Message": x.message, "Hosts": list(x.hosts)} for x in diagnostics],
    }
    return d


def _summary(result: JobResult, stream: TextIO, echo: bool, first: tuple[str, int, float] | None,
             console: Sequence[str] = ()) -> None:
    if not echo:
        return
    rows = [(h.name, h.how, str(h.log)) for h in result.hosts]
    colour = "32" if result.ok else "31"
    stream.write("\n" + table(["host", "ended", "log"], rows) + "\n")
    stream.write(paint(f"{result.job_name}: {result.status} ({result.secondary_status})", colour, stream) + "\n")
    if first is not None:
        host = next(h for h in result.hosts if h.name == first[0])
        stream.write(f"first failure: {host.name} ({host.how}); last lines of {host.log}:\n")
        stream.write("\n".join("    " + line for line in tail(host.log, FAILED_LOG_LINES).splitlines()) + "\n")
    if result.failure_reason:
        stream.write(f"FailureReason: {result.failure_reason}\n")
    for w in result.warnings:
        stream.write(paint(f"warning: {w}", "33", stream) + "\n")
    for d in result.diagnostics:
        stream.write(paint(f"diagnostic ({d.kind}): {d.message}", "33", stream) + "\n")
    for line in console:  # debugging (issue 13)
        stream.write(line + "\n")
    stream.write(f"job.json: {result.job_dir / 'job.json'}\n")
    stream.flush()


_ = signal
