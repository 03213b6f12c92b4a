"""Supervisor: run a planned job on a backend, watch every host, and report as SageMaker does.

Statuses and secondary statuses follow DescribeTrainingJob (Starting → Downloading → Training →
Uploading → Completed/Failed; Stopping → Stopped/MaxRuntimeExceeded). All-or-nothing watching:
the job completes when every host exited 0 and fails as soon as any host exits non-zero — the
other hosts are then stopped whole (peers stuck in a gloo collective do not wait for their own
timeout). ``MaxRuntimeInSeconds`` ends the job as SageMaker does: SIGTERM to each host's PID 1,
``stop_grace`` seconds (SageMaker: 120), then SIGKILL. Teardown runs in ``finally``.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
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
    "MaxRuntimeExceeded": "Training job stopped: MaxRuntimeInSeconds exceeded",
}


@dataclass
class _Clock:
    transitions: list[Transition]

    def enter(self, status: str, message: str | None = None) -> None:
        now = time.time()
        if self.transitions:
            last = self.transitions[-1]
            self.transitions[-1] = Transition(last.status, last.start, now, last.message)
        self.transitions.append(Transition(status, now, None, message or MESSAGES[status]))

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
    return planning.build(request, base_env=backend.base_env(), inhost_root=backend.inhost_root,
                          train_command=command, python=python, num_cpus=os.cpu_count() or 1,
                          diag_dir=diag_dir, aws_credentials=dict(os.environ), extra_path=extra_path)


def run(request: JobRequest, *, backend: str | Backend = "process", stream: TextIO | None = None,
        echo: bool = True, stop_grace: float = SAGEMAKER_STOP_GRACE, keep_hosts: bool = False,
        faults: Sequence[Any] = ()) -> JobResult:
    """Run ``request`` to the end and return its :class:`JobResult`. Writes ``job.json``."""
    stream = stream or sys.stdout
    be = get_backend(backend) if isinstance(backend, str) else backend
    be.check()
    created = time.time()
    clock = _Clock([])
    clock.enter("Starting")
    job_dir = request.job_dir
    job_dir.mkdir(parents=True, exist_ok=True)
    logs = job_dir / "logs"
    logs.mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"sm-emulator-{request.job_name[:20]}-"))
    (scratch / "owner").write_text(f"{os.getpid()}\n")
    diag_dir = scratch / "diagnostics"
    diag_dir.mkdir()
    handle: JobHandle | None = None
    tailer: LogTailer | None = None
    outcome = "Failed"
    secondary = "Failed"
    first: tuple[str, int, float] | None = None
    interrupted = False
    try:
        python, _prepared = jobenv.prepare(request.source_dir, job_dir / "hosts", logs / "jobenv.log")
        job_plan = plan_for(request, be, python=python if be.name == "process" else None,
                            diag_dir=DIAG_TARGET)
        clock.enter("Downloading")
        trees = materialise.write_all(job_plan, job_dir)
        log_paths = {h.name: logs / f"{h.name}.log" for h in job_plan.hosts}
        for p in log_paths.values():
            p.write_bytes(b"")
        job_id = f"{request.job_name[:40]}-{uuid.uuid4().hex[:8]}"
        specs = [HostSpec(name=h.name, address=h.address, opt_ml=trees[h.name][0], env=h.env,
                          command=h.command, workdir="/opt/ml/code", hosts_file=job_plan.hosts_file,
                          log_path=log_paths[h.name], mounts=[*trees[h.name][1], *be.inhost_mounts(),
                                                      Mount(diag_dir, DIAG_TARGET)],
                          image=request.image_uri,
                          labels={"sagemaker-emulator.job": request.job_name})
                 for h in job_plan.hosts]
        tailer = LogTailer(log_paths, stream=stream, echo=echo).start()
        clock.enter("Training")
        _say(stream, f"{request.job_name}: starting {len(specs)} host(s) on the {be.name} backend, "
             f"runner {job_plan.runner}", echo)
        handle = be.start(JobSpec(job_id=job_id, hosts=specs, scratch=scratch / "backend"))
        started = time.monotonic()
        deadline = started + request.max_runtime_seconds
        exits: dict[str, tuple[int, float]] = {}
        while True:
            for name, host in handle.hosts.items():
                rc = host.poll()
                if rc is not None and name not in exits:
                    exits[name] = (rc, time.time())
                    if rc != 0 and first is None:
                        first = (name, rc, time.time())
            if first is not None:
                outcome, secondary = "Failed", "Failed"
                break
            if len(exits) == len(specs):
                outcome, secondary = "Completed", "Completed"
                break
            if time.monotonic() >= deadline:
                clock.enter("Stopping")
                _say(stream, f"MaxRuntimeInSeconds ({request.max_runtime_seconds}) exceeded: "
                     f"SIGTERM, then SIGKILL after {stop_grace:g} s", echo)
                handle.teardown(stop_grace)
                outcome, secondary = "Stopped", "MaxRuntimeExceeded"
                break
            time.sleep(POLL_INTERVAL)
    except KeyboardInterrupt:
        interrupted = True
        clock.enter("Stopping")
        outcome, secondary = "Stopped", "Stopped"
    finally:
        if handle is not None:
            handle.teardown(FAIL_FAST_GRACE)
        if tailer is not None:
            tailer.stop()
    hosts = []
    if handle is not None:
        for name, host in handle.hosts.items():
            rc = host.poll()
            failure_file = materialise.host_root(job_dir, name) / "output" / "failure"
            hosts.append(HostOutcome(name, rc, job_dir / "logs" / f"{name}.log",
                                     None, failure_file.read_text(errors="replace") if failure_file.exists() else None))
    clock.enter("Uploading")
    roots = [materialise.host_root(job_dir, h.name) for h in hosts]
    out_dir = job_dir / "output"
    model = build_archive(out_dir / "model.tar.gz", [r / "model" for r in roots], always=True)
    output = build_archive(out_dir / "output.tar.gz", [r / "output" / "data" for r in roots], always=False)
    if handle is not None:
        materialise.sync_checkpoints(job_plan, job_dir)
    failure_reason = None
    if outcome == "Failed":
        failure_reason = _failure_reason(hosts, first)
    diagnostics = _diagnostics(diag_dir)
    clock.enter(secondary, MESSAGES[secondary] if secondary != "MaxRuntimeExceeded" else None)
    clock.close()
    end = time.time()
    description = _describe(request, clock, created, end, outcome, secondary, failure_reason, model,
                            hosts, first, diagnostics, be.name, job_plan.runner if handle else None)
    write_description(job_dir / "job.json", description)
    if not keep_hosts:
        shutil.rmtree(job_dir / "hosts", ignore_errors=True)
    shutil.rmtree(scratch, ignore_errors=True)
    result = JobResult(job_name=request.job_name, status=outcome, secondary_status=secondary,
                       failure_reason=failure_reason, job_dir=job_dir, hosts=tuple(hosts),
                       description=description, model_artifact=model, output_artifact=output,
                       diagnostics=tuple(diagnostics), first_failure=first[0] if first else None)
    _summary(result, stream, echo, first)
    if interrupted:
        raise KeyboardInterrupt
    return result


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
    return f"AlgorithmError: Exit Code: {code}"


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


def _summary(result: JobResult, stream: TextIO, echo: bool, first: tuple[str, int, float] | None) -> None:
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
    for d in result.diagnostics:
        stream.write(paint(f"diagnostic ({d.kind}): {d.message}", "33", stream) + "\n")
    stream.write(f"job.json: {result.job_dir / 'job.json'}\n")
    stream.flush()


_ = signal
