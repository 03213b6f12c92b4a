"""``job.json``: a finished job as DescribeTrainingJob describes it, plus the emulator's own facts.

The top-level keys follow DescribeTrainingJob (AWS API reference:
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DescribeTrainingJob.html): the
request's fields echoed, statuses and their transitions, times, ``ModelArtifacts`` and, for a
failed job, ``FailureReason`` as SageMaker words it. ``Emulator`` holds what SageMaker does not
report (backend, hosts and how they ended, diagnostics, events …); it is not emulated, it is the
emulator's. The supervisor (:mod:`emulator.supervisor`) gathers the values; this module only
renders them.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .inhost import protocol as P
from .job.request import JobRequest
from .job.result import FAILURE_REASON_LIMIT, Diagnostic, HostOutcome, Transition, iso

#: Where the spec that ran is written in the job dir.
LAUNCH_SPEC_FILE = "launch-spec.json"


@dataclass(frozen=True)
class FirstFailure:
    """The host that failed first: how it ended and when (wall clock)."""

    host: str
    exit: P.HostExit
    time: float


def failure_reason(hosts: Sequence[HostOutcome], first: FirstFailure | None) -> str:
    """``AlgorithmError: `` + the first failing host's failure file (as the toolkit wrote it), else
    the container's exit status, as SageMaker reports it."""
    ordered = sorted(hosts, key=lambda h: (h.name != (first.host if first else None), h.name))
    for h in ordered:
        if h.failure:
            return ("AlgorithmError: " + h.failure.strip())[:FAILURE_REASON_LIMIT]
    return f"AlgorithmError: Exit Code: {first.exit.status if first else 1}"


def describe(request: JobRequest, *, transitions: Sequence[Transition], created: float, end: float,
             status: str, secondary_status: str, runner: str | None, hosts: Sequence[HostOutcome],
             first_failure: FirstFailure | None, diagnostics: Sequence[Diagnostic], backend: str,
             failure: str | None, training_image: str | None, billable_seconds: float | None = None,
             emulator: Mapping[str, Any] | None = None,
             fields: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``job.json`` of a finished job. ``failure``: its ``FailureReason`` (Failed jobs; None:
    :func:`failure_reason`); ``training_image``: ``AlgorithmSpecification.TrainingImage`` when the
    request names none; ``billable_seconds``: ``BillableTimeInSeconds`` when it is not the training
    time (spot); ``emulator``: more fields of ``Emulator``; ``fields``: DescribeTrainingJob fields
    the observers filled (``FinalMetricDataList``)."""
    start = next((t.start for t in transitions if t.status == "Downloading"), created)
    seconds = max(1, round(end - start))
    first = first_failure
    d: dict[str, Any] = {
        "TrainingJobName": request.job_name,
        "TrainingJobArn": request.arn,
        "TrainingJobStatus": status,
        "SecondaryStatus": secondary_status,
        "SecondaryStatusTransitions": [t.to_dict() for t in transitions],
        "CreationTime": iso(created),
        "TrainingStartTime": iso(start),
        "TrainingEndTime": iso(end),
        "LastModifiedTime": iso(end),
        "TrainingTimeInSeconds": seconds,
        "BillableTimeInSeconds": seconds,
        **{k: v for k, v in request.to_dict(training_image=training_image).items() if k != "TrainingJobName"},
    }
    if billable_seconds is not None:
        d["BillableTimeInSeconds"] = max(1, round(billable_seconds))
    model = request.job_dir / "output" / "model.tar.gz"
    d["ModelArtifacts"] = {"S3ModelArtifacts": model.as_uri() if model.exists() else None}
    d.update(fields or {})
    if status == "Failed":
        d["FailureReason"] = failure or failure_reason(hosts, first)
    d["Emulator"] = {
        "Backend": backend,
        "Runner": runner,
        "Profile": request.profile,
        "JobDir": str(request.job_dir),
        "LaunchSpec": str(request.job_dir / LAUNCH_SPEC_FILE),
        "Hosts": [{"Host": h.name, "ExitCode": h.exit_code, "Signal": signal_name(h.signal), "How": h.how,
                   "Log": str(h.log)} for h in hosts],
        "FirstFailure": ({"Host": first.host, "ExitCode": first.exit.status,
                          "Signal": signal_name(first.exit.signal), "Time": iso(first.time)} if first else None),
        "Diagnostics": [{"Kind": x.kind, "Message": x.message, "Hosts": list(x.hosts)} for x in diagnostics],
        **(emulator or {}),
    }
    return d


def signal_name(sig: int | None) -> str | None:
    """``SIGKILL`` for 9; the number as text for a signal this machine does not name."""
    if sig is None:
        return None
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


__all__ = ["LAUNCH_SPEC_FILE", "FirstFailure", "describe", "failure_reason", "signal_name"]
