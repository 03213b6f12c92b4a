"""Hyperparameter tuning jobs on the emulator: the tuning calls of the SageMaker client.

``create`` validates the request (:func:`emulator.sdk.tuning.validate`), translates the first
training job's request once (so a bad channel or source location is refused before any host
starts) and runs the training jobs in a background thread through the client's own
``create_training_job``, at most ``MaxParallelTrainingJobs`` at a time — and at most this
machine's cores divided by the instance count, a cap said in ``Emulator.MaxParallelTrainingJobs``
and as a warning. DescribeHyperParameterTuningJob, ListTrainingJobsForHyperParameterTuningJob
and StopHyperParameterTuningJob answer from those runs in the service model's shapes.

Emulated as documented: Grid (every categorical combination) and Random search; a training job's
objective is the last value its metric definition read from its logs (``FinalMetricDataList``);
``ObjectiveStatus`` is ``Succeeded`` when the job completed with that value and ``Failed``
otherwise ("This typically occurs when the training job failed or did not emit an objective
metric", *HyperParameterTrainingJobSummary*); ``BestTrainingJob`` is the best such job (the first
one on a tie); ``TrainingJobStatusCounters`` count a job that failed in the emulator itself as
``RetryableError`` and every other failure as ``NonRetryableError``; ListTrainingJobs… sorts by
``Name`` ascending and returns 10 per page by default (the API reference).

Stated deviations: Bayesian and Hyperband run as random search with the same budget;
``TrainingJobEarlyStoppingType: Auto`` is accepted and recorded as not emulated (no job is
stopped early); ``ResourceLimits.MaxRuntimeInSeconds``, ``TuningJobCompletionCriteria`` and
training-job retries are not enforced. When no training job gives the objective, the tuning job
ends ``Failed`` with the reason SageMaker gives when no training job succeeds ("No training job
succeeded after N attempts. Please take a look at the training job failures to get more
details.", seen in aws/amazon-sagemaker-examples#2437); its text for jobs that completed without
the metric is not documented, so the emulator uses the same one and appends, as its own words,
the objective's regex and the log line nearest to it.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import RequestError
from ..job.result import iso
from . import tuning as T
from .service_errors import client_error

if TYPE_CHECKING:
    from .s3 import S3Store


class TrainingJobClient(Protocol):
    """What a tuning job uses of :class:`~emulator.sdk.client.EmulatorSageMakerClient`, which
    imports this module (so this one names the client only through this protocol)."""

    @property
    def region(self) -> str: ...
    @property
    def store(self) -> S3Store: ...
    @property
    def store_account(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def gpus_per_host(self) -> int | None: ...
    @property
    def framework_version(self) -> str | None: ...
    @property
    def jobs(self) -> Mapping[str, Any]: ...
    def arn(self, name: str) -> str: ...
    def create_training_job(self, **create: Any) -> dict[str, Any]: ...
    def describe_training_job(self, TrainingJobName: str) -> dict[str, Any]: ...

#: How often the tuning thread looks at its running training jobs.
POLL = 0.2
#: FailureReason's maximum length (service model).
REASON_MAX = 1024
SORT_KEYS = ("Name", "CreationTime", "Status", "FinalObjectiveMetricValue")


@dataclass
class Trial:
    """One training job of a tuning job."""

    name: str
    tuned: dict[str, str]
    created: float
    description: dict[str, Any] | None = None
    objective: float | None = None

    @property
    def status(self) -> str:
        return "InProgress" if self.description is None else str(self.description["TrainingJobStatus"])

    @property
    def objective_status(self) -> str:
        if self.description is None:
            return "Pending"
        # a stopped job's last value counts too (early stopping on SageMaker stops jobs that have one)
        return "Succeeded" if self.status in ("Completed", "Stopped") and self.objective is not None else "Failed"


@dataclass
class TuningJob:
    spec: T.TuningSpec
    created: float
    parallel: int
    seed: int
    trials: list[Trial] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    ended: float | None = None
    failure_reason: str | None = None
    warnings: list[str] = field(default_factory=list)
    thread: threading.Thread | None = None

    @property
    def status(self) -> str:
        if not self.done.is_set():
            return "Stopping" if self.stop.is_set() else "InProgress"
        if self.stop.is_set():
            return "Stopped"
        return "Failed" if self.failure_reason else "Completed"


def parallel_slots(max_parallel: int, *, cores: int, instances: int) -> int:
    """Training jobs run at once: ``MaxParallelTrainingJobs``, at most one host per core of this
    machine (at least one job)."""
    return max(1, min(max_parallel, cores // max(1, instances)))


class TuningJobs:
    """The tuning jobs of one :class:`~emulator.sdk.client.EmulatorSageMakerClient`."""

    def __init__(self, client: TrainingJobClient, *, cores: int | None = None) -> None:
        self.client = client
        self.cores = cores or os.cpu_count() or 1
        self.jobs: dict[str, TuningJob] = {}
        #: Training job name → its tuning job's ARN (DescribeTrainingJob's ``TuningJobArn``).
        self.parents: dict[str, str] = {}

    def arn(self, name: str) -> str:
        return (f"arn:aws:sagemaker:{self.client.region}:{self.client.store_account}:"
                f"hyper-parameter-tuning-job/{name.lower()}")

    # CreateHyperParameterTuningJob -----------------------------------------------------------
    def create(self, create: dict[str, Any]) -> dict[str, Any]:
        name = create.get("HyperParameterTuningJobName", "")
        if isinstance(name, str) and name.lower() in {n.lower() for n in self.jobs}:
            raise client_error("ResourceInUse", f"Hyperparameter tuning job with name {name} already exists.",
                               T.OPERATION)
        try:
            spec = T.validate(create)
            self._dry_run(spec)
        except RequestError as exc:
            raise client_error("ValidationException", str(exc), T.OPERATION) from exc
        instances = int((spec.definition.get("HyperParameterTuningResourceConfig")
                         or spec.definition.get("ResourceConfig") or {}).get("InstanceCount", 1) or 1)
        seed = spec.random_seed if spec.random_seed is not None else random.SystemRandom().randrange(2**31)
        job = TuningJob(spec=spec, created=time.time(), seed=seed,
                        parallel=parallel_slots(spec.max_parallel, cores=self.cores, instances=instances))
        if job.parallel < spec.max_parallel:
            job.warnings.append(f"MaxParallelTrainingJobs {spec.max_parallel} runs as {job.parallel} at a time: "
                                f"this machine has {self.cores} core(s) and each training job {instances} host(s)")
        if spec.strategy in T.RUN_AS_RANDOM:
            job.warnings.append(f"the {spec.strategy} strategy is not emulated: it runs as random search with "
                                f"the same budget ({spec.max_jobs} training jobs)")
        if spec.early_stopping != "Off":
            job.warnings.append(f"TrainingJobEarlyStoppingType {spec.early_stopping!r} is not emulated: "
                                "no training job is stopped early")
        self.jobs[spec.name] = job
        for text in job.warnings:
            sys.stderr.write(f"[emulator] {spec.name}: warning: {text}\n")
        job.thread = threading.Thread(target=self._run, args=(job,), name=f"emulator-tuning-{spec.name}",
                                      daemon=False)
        job.thread.start()
        return {"HyperParameterTuningJobArn": self.arn(spec.name)}

    def _dry_run(self, spec: T.TuningSpec) -> None:
        """Translate one training job's request (then throw it away): what the definition gets
        wrong is refused before any host starts, naming the field."""
        import shutil

        from .translate import from_create_training_job

        request = T.training_job_request(spec, f"{spec.name}-000-00000000",
                                         {r.name: r.sample(random.Random(0)) for r in spec.ranges})
        from ..backends import get_backend

        c = self.client
        translated = from_create_training_job(request, store=c.store, region=c.region,
                                              gpus_per_host=c.gpus_per_host, framework_version=c.framework_version)
        try:  # a framework this backend cannot run, as create_training_job checks it
            get_backend(c.backend).job_python(translated.request)
        finally:
            for d in translated.temp_dirs:
                shutil.rmtree(d, ignore_errors=True)

    # the tuning thread ---------------------------------------------------------------------
    def _run(self, job: TuningJob) -> None:
        rng = random.Random(job.seed)
        pending = list(enumerate(T.candidates(job.spec, rng), start=1))
        running: list[Trial] = []
        try:
            while pending or running:
                if job.stop.is_set():
                    for t in running:
                        self._stop_training(t.name)
                    pending.clear()
                while pending and len(running) < job.parallel and not job.stop.is_set():
                    index, tuned = pending.pop(0)
                    running.append(self._start(job, index, tuned, rng))
                for t in list(running):
                    emulated = self.client.jobs.get(t.name)
                    if emulated is None or emulated.done.is_set():
                        self._finish(job, t)
                        running.remove(t)
                if running:
                    self.client.jobs[running[0].name].done.wait(POLL)
        except BaseException as exc:  # the emulator's own failure: say so, never hang the SDK's wait
            job.failure_reason = f"InternalServerError: the emulator failed: {exc!r}"
        finally:
            job.ended = time.time()
            if job.failure_reason is None and not job.stop.is_set():
                job.failure_reason = self._failure(job)
            job.done.set()

    def _start(self, job: TuningJob, index: int, tuned: dict[str, str], rng: random.Random) -> Trial:
        name = T.training_job_name(job.spec.name, index, rng)
        trial = Trial(name=name, tuned=tuned, created=time.time())
        job.trials.append(trial)
        self.parents[name] = self.arn(job.spec.name)
        self.client.create_training_job(**T.training_job_request(job.spec, name, tuned))
        return trial

    def _stop_training(self, name: str) -> None:
        emulated = self.client.jobs.get(name)
        if emulated is not None and emulated.running:
            emulated.stop.set()

    def _finish(self, job: TuningJob, trial: Trial) -> None:
        desc = self.client.describe_training_job(TrainingJobName=trial.name)
        trial.description = desc
        for m in desc.get("FinalMetricDataList") or []:
            if m.get("MetricName") == job.spec.objective_name:
                trial.objective = float(m["Value"])

    def _failure(self, job: TuningJob) -> str | None:
        """None when a training job gave the objective; else the reason (module docstring)."""
        if any(t.objective_status == "Succeeded" for t in job.trials):
            return None
        n = len(job.trials)
        reason = (f"No training job succeeded after {n} attempts. Please take a look at the training job "
                  "failures to get more details.")
        completed = [t for t in job.trials if t.status == "Completed"]
        if completed:
            reason += (f" [emulator: {len(completed)} training job(s) completed but none reported the objective "
                       f"metric {job.spec.objective_name!r} (regex {job.spec.objective_regex!r})")
            near = self._nearest(job, completed)
            reason += f"; nearest log line, {near}]" if near else "; no log line came near it]"
        return reason[:REASON_MAX]

    def _nearest(self, job: TuningJob, trials: list[Trial]) -> str | None:
        for t in trials:
            unmatched = ((t.description or {}).get("Emulator") or {}).get("Metrics", {}).get("Unmatched") or []
            for u in unmatched:
                near = u.get("NearestLine") if u.get("MetricName") == job.spec.objective_name else None
                if near:
                    return f"{t.name} {near['Host']}: {near['Line'][:200]!r}"
        return None

    # Describe / List / Stop ----------------------------------------------------------------
    def _get(self, name: str, operation: str) -> TuningJob:
        job = self.jobs.get(name)
        if job is None:
            raise client_error("ResourceNotFound", f"Amazon SageMaker can't find a tuning job named {name}",
                               operation)
        return job

    def summary(self, job: TuningJob, trial: Trial) -> dict[str, Any]:
        """A ``HyperParameterTrainingJobSummary``."""
        desc = trial.description or {}
        out: dict[str, Any] = {"TrainingJobName": trial.name, "TrainingJobArn": self.client.arn(trial.name),
                               "TuningJobName": job.spec.name, "CreationTime": _dt(trial.created),
                               "TrainingJobStatus": trial.status, "TunedHyperParameters": dict(trial.tuned),
                               "ObjectiveStatus": trial.objective_status}
        for key in ("TrainingStartTime", "TrainingEndTime", "FailureReason"):
            if desc.get(key) is not None:
                out[key] = desc[key]
        if trial.objective is not None:
            out["FinalHyperParameterTuningJobObjectiveMetric"] = {
                "Type": job.spec.objective_type, "MetricName": job.spec.objective_name, "Value": trial.objective}
        return out

    def best(self, job: TuningJob) -> Trial | None:
        scored = [t for t in job.trials if t.objective_status == "Succeeded"]
        if not scored:
            return None
        sign = -1.0 if job.spec.objective_type == "Maximize" else 1.0
        return min(scored, key=lambda t: sign * (t.objective or 0.0))  # min keeps the first on a tie

    def describe(self, name: str) -> dict[str, Any]:
        job = self._get(name, "DescribeHyperParameterTuningJob")
        create = job.spec.create_request
        trials = list(job.trials)
        counters = {"Completed": 0, "InProgress": 0, "RetryableError": 0, "NonRetryableError": 0, "Stopped": 0}
        objectives = {"Succeeded": 0, "Pending": 0, "Failed": 0}
        for t in trials:
            objectives[t.objective_status] += 1
            if t.status == "Failed":
                internal = str((t.description or {}).get("FailureReason", "")).startswith("InternalServerError")
                counters["RetryableError" if internal else "NonRetryableError"] += 1
            elif t.status in counters:
                counters[t.status] += 1
            else:  # Stopping
                counters["InProgress"] += 1
        out: dict[str, Any] = {
            "HyperParameterTuningJobName": job.spec.name, "HyperParameterTuningJobArn": self.arn(job.spec.name),
            "HyperParameterTuningJobConfig": create[T.CONFIG], "TrainingJobDefinition": create[T.DEFINITION],
            "HyperParameterTuningJobStatus": job.status, "CreationTime": _dt(job.created),
            "LastModifiedTime": _dt(job.ended or time.time()),
            "TrainingJobStatusCounters": counters, "ObjectiveStatusCounters": objectives,
            "Emulator": {"Strategy": job.spec.strategy,
                         "RunAs": "Random" if job.spec.strategy in T.RUN_AS_RANDOM else job.spec.strategy,
                         "RandomSeed": job.seed, "MaxParallelTrainingJobs": job.parallel,
                         "EarlyStopping": "not emulated", "Warnings": list(job.warnings)}}
        if job.ended is not None:
            out["HyperParameterTuningEndTime"] = _dt(job.ended)
            out["ConsumedResources"] = {"RuntimeInSeconds": int(job.ended - job.created)}
        best = self.best(job)
        if best is not None:
            out["BestTrainingJob"] = self.summary(job, best)
        if job.done.is_set() and job.failure_reason:
            out["FailureReason"] = job.failure_reason
        if "Tags" in create:
            out["Tags"] = create["Tags"]
        return out

    def list_training_jobs(self, HyperParameterTuningJobName: str, NextToken: str | None = None,
                           MaxResults: int = 10, StatusEquals: str | None = None, SortBy: str = "Name",
                           SortOrder: str = "Ascending") -> dict[str, Any]:
        operation = "ListTrainingJobsForHyperParameterTuningJob"
        job = self._get(HyperParameterTuningJobName, operation)
        if SortBy not in SORT_KEYS or SortOrder not in ("Ascending", "Descending") or not 1 <= MaxResults <= 100:
                raise client_error("ValidationException", f"SortBy {SortBy!r}, SortOrder {SortOrder!r}, MaxResults "
                               f"{MaxResults}: allowed {SORT_KEYS}, Ascending|Descending, 1-100", operation)
        trials = [t for t in job.trials if StatusEquals is None or t.status == StatusEquals]
        if SortBy == "FinalObjectiveMetricValue":  # "jobs that did not return an objective metric are not listed"
            trials = sorted((t for t in trials if t.objective is not None), key=lambda t: t.objective or 0.0)
        else:
            key = {"Name": lambda t: t.name, "CreationTime": lambda t: t.created,
                   "Status": lambda t: t.status}[SortBy]
            trials = sorted(trials, key=key)  # type: ignore[arg-type]
        if SortOrder == "Descending":
            trials.reverse()
        start = int(NextToken or 0)
        page = trials[start:start + MaxResults]
        out: dict[str, Any] = {"TrainingJobSummaries": [self.summary(job, t) for t in page]}
        if start + MaxResults < len(trials):
            out["NextToken"] = str(start + MaxResults)
        return out

    def stop(self, name: str) -> dict[str, Any]:
        job = self._get(name, "StopHyperParameterTuningJob")
        if job.done.is_set():
            raise client_error("ValidationException", f"The hyperparameter tuning job {name} is in status "
                               f"{job.status} and cannot be stopped.", "StopHyperParameterTuningJob")
        job.stop.set()
        return {}

    def wait(self, name: str, timeout: float | None = None) -> TuningJob:
        job = self._get(name, "DescribeHyperParameterTuningJob")
        job.done.wait(timeout)
        return job


def _dt(t: float) -> Any:
    from datetime import datetime

    return datetime.fromisoformat(iso(t))


__all__ = ["TuningJob", "TuningJobs", "parallel_slots"]
