"""A stand-in for boto3's SageMaker client, answering the training-job calls from the emulator.

``create_training_job`` translates the request the SDK built and runs it on the emulator in a
background thread (so ``fit(wait=False)`` returns at once, as on SageMaker);
``describe_training_job`` answers in DescribeTrainingJob's shape with the request's own ``s3://``
URIs; ``stop_training_job`` stops the job; ``list_tags`` returns the tags sent. A finished job is
found again from another process through an index under the S3 folder, so ``Estimator.attach``
works after the launcher that ran it has exited.

The hyperparameter tuning calls (Create/Describe/Stop HyperParameterTuningJob,
ListTrainingJobsForHyperParameterTuningJob) are answered by :mod:`emulator.sdk.tuning_jobs`, whose
training jobs run through ``create_training_job`` like any other.

Every other SageMaker API call raises :class:`NotImplementedError` naming the call: nothing is sent
to AWS.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from ..backends import get_backend
from ..diagnostics.metrics import METRICS_FILE
from ..errors import EmulatorError, RequestError
from ..inhost import protocol as P
from ..job import profiles
from ..job.result import JobResult, iso
from .cwmetrics import publish as publish_metrics
from .redirect import FRAMEWORK_VAR
from .s3 import INTERNAL, S3Store, default_store
from .service_errors import client_error
from .translate import Translated, from_create_training_job
from .tuning_jobs import TuningJobs

#: Fields of the CreateTrainingJob request that DescribeTrainingJob echoes back.
ECHOED = ("TrainingJobName", "HyperParameters", "AlgorithmSpecification", "RoleArn", "InputDataConfig",
          "OutputDataConfig", "ResourceConfig", "StoppingCondition", "CheckpointConfig", "Environment",
          "VpcConfig", "EnableNetworkIsolation", "EnableInterContainerTrafficEncryption",
          "EnableManagedSpotTraining", "DebugHookConfig", "DebugRuleConfigurations",
          "TensorBoardOutputConfig", "ExperimentConfig", "ProfilerConfig", "ProfilerRuleConfigurations",
          "RetryStrategy", "RemoteDebugConfig", "InfraCheckConfig")
#: Members DescribeTrainingJob fills in when the request left them out.
SERVICE_DEFAULTS: dict[str, dict[str, Any]] = {"OutputDataConfig": {"KmsKeyId": "", "CompressionType": "GZIP"},
                    "ResourceConfig": {"VolumeSizeInGB": 30},
                    "AlgorithmSpecification": {"TrainingInputMode": "File",
                                               "EnableSageMakerMetricsTimeSeries": False}}
FLAG_DEFAULTS = {"EnableNetworkIsolation": False, "EnableInterContainerTrafficEncryption": False,
                 "EnableManagedSpotTraining": False}
#: DescribeTrainingJob fields that boto3 returns as datetimes.
TIME_FIELDS = ("CreationTime", "TrainingStartTime", "TrainingEndTime", "LastModifiedTime")


@dataclass
class EmulatedJob:
    """One job this process started (or found on disk)."""

    translated: Translated | None
    job_dir: Path
    created: float
    thread: threading.Thread | None = None
    result: JobResult | None = None
    error: BaseException | None = None
    description: dict[str, Any] | None = None
    done: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    #: Its metric values are in this process's CloudWatch (moto; :mod:`emulator.sdk.cwmetrics`).
    metrics_published: bool = False

    @property
    def stop_requested(self) -> bool:
        return self.stop.is_set()

    @property
    def running(self) -> bool:
        return not self.done.is_set()


class EmulatorSageMakerClient:
    """The subset of ``boto3.client("sagemaker")`` the SDK uses for training jobs."""

    def __init__(self, store: S3Store, *, region: str, backend: str = "auto",
                 gpus_per_host: int | None = None, keep_hosts: bool = False,
                 stop_grace: float = P.STOP_GRACE, framework_version: str | None = None,
                 profile: str | None = None) -> None:
        """``framework_version``: overrides the framework every job's ``TrainingImage`` names
        (``"current"``: today's torch); default ``$SAGEMAKER_EMULATOR_FRAMEWORK_VERSION``, else none.
        ``profile``: every job's (:mod:`emulator.job.profiles`); unset, ``$SAGEMAKER_EMULATOR_PROFILE``,
        else ``exact``."""
        self.profile = profiles.resolve(profile)  # an unknown name is refused here, before any job
        self.store = store
        self.region = region
        self.backend = backend
        self.framework_version = framework_version or os.environ.get(FRAMEWORK_VAR) or None
        self.gpus_per_host = gpus_per_host
        self.keep_hosts = keep_hosts
        self.stop_grace = stop_grace
        self.jobs: dict[str, EmulatedJob] = {}
        #: Called with each job this client starts, right before its thread starts.
        self.on_start: list[Callable[[EmulatedJob], None]] = []
        #: Called with each job when it has ended, before DescribeTrainingJob reports it ended.
        self.on_finish: list[Callable[[EmulatedJob], None]] = []
        self._tuning: TuningJobs | None = None

    # index of jobs on disk, so attach() works from another process ---------------------------
    def _index(self, name: str) -> Path:
        return self.store.root / INTERNAL / "jobs" / f"{name}.json"

    def _lookup(self, name: str) -> EmulatedJob | None:
        if name in self.jobs:
            return self.jobs[name]
        index = self._index(name)
        if not index.exists():
            return None
        entry = json.loads(index.read_text())
        job = EmulatedJob(translated=None, job_dir=Path(entry["JobDir"]), created=entry["Created"])
        job.description = entry.get("Request")
        if (job.job_dir / "job.json").exists():
            job.done.set()
        self.jobs[name] = job
        return job

    # the API -----------------------------------------------------------------------------
    def create_training_job(self, **create: Any) -> dict[str, Any]:
        name = create.get("TrainingJobName", "")
        if self._lookup(name) is not None:
            raise client_error("ResourceInUse", "Training job names must be unique within an AWS account "
                               "and region, and a training job with this name already exists "
                               f"({self.arn(name)})", "CreateTrainingJob")
        try:
            translated = from_create_training_job(create, store=self.store, region=self.region,
                                                  gpus_per_host=self.gpus_per_host,
                                                  framework_version=self.framework_version)
        except RequestError as exc:
            raise client_error("ValidationException", str(exc), "CreateTrainingJob") from exc
        try:  # a framework this backend cannot run (torch 1.12 on the process backend's Python 3.11)
            get_backend(self.backend).job_python(translated.request)
        except RequestError as exc:
            for d in translated.temp_dirs:
                shutil.rmtree(d, ignore_errors=True)
            raise client_error("ValidationException", str(exc), "CreateTrainingJob") from exc
        translated.request = request = replace(translated.request, profile=self.profile)
        job = EmulatedJob(translated=translated, job_dir=request.job_dir, created=time.time())
        self.jobs[name] = job
        index = self._index(name)
        index.parent.mkdir(parents=True, exist_ok=True)
        index.write_text(json.dumps({"JobDir": str(request.job_dir), "Created": job.created,
                                     "Request": _jsonable(create)}, indent=1))
        for hook in self.on_start:
            hook(job)
        job.thread = threading.Thread(target=self._run, args=(job,), name=f"emulator-job-{name}",
                                      daemon=False)
        job.thread.start()
        return {"TrainingJobArn": self.arn(name)}

    def _run(self, job: EmulatedJob) -> None:
        from ..supervisor import run

        assert job.translated is not None
        try:
            job.result = run(job.translated.request, backend=self.backend, echo=False,
                             stop_grace=self.stop_grace, keep_hosts=self.keep_hosts, stop=job.stop)
        except BaseException as exc:
            job.error = exc
        finally:
            try:
                self._publish(job)
                for hook in self.on_finish:
                    hook(job)
            finally:
                for d in job.translated.temp_dirs:
                    shutil.rmtree(d, ignore_errors=True)
                job.done.set()

    def _publish(self, job: EmulatedJob) -> None:
        """Put what the job wrote under an ``s3://`` location into moto too."""
        assert job.translated is not None
        out = job.job_dir / "output"
        if out.is_dir() and str(job.job_dir).startswith(str(self.store.root)):
            self.store.load(out)
        ckpt = job.translated.request.checkpoint_dir
        if job.translated.checkpoint_uri and ckpt is not None and ckpt.is_dir() and any(ckpt.iterdir()):
            self.store.load(ckpt)

    def describe_training_job(self, TrainingJobName: str) -> dict[str, Any]:
        job = self._lookup(TrainingJobName)
        if job is None:
            raise client_error("ValidationException", f"Requested resource not found: training job "
                               f"{TrainingJobName!r} does not exist", "DescribeTrainingJob")
        create = job.translated.create_request if job.translated else (job.description or {})
        desc: dict[str, Any]
        if job.running:
            desc = {"TrainingJobName": TrainingJobName, "TrainingJobArn": self.arn(TrainingJobName),
                    "TrainingJobStatus": "Stopping" if job.stop_requested else "InProgress",
                    "SecondaryStatus": "Stopping" if job.stop_requested else "Training",
                    "CreationTime": iso(job.created), "LastModifiedTime": iso(time.time())}
        elif (job.job_dir / "job.json").exists():
            desc = json.loads((job.job_dir / "job.json").read_text())
            if not job.metrics_published:  # once per process (an attached job's too)
                job.metrics_published = True
                publish_metrics(TrainingJobName, job.job_dir / METRICS_FILE, region=self.region)
        else:
            desc = {"TrainingJobName": TrainingJobName, "TrainingJobArn": self.arn(TrainingJobName),
                    "TrainingJobStatus": "Failed", "SecondaryStatus": "Failed",
                    "CreationTime": iso(job.created), "LastModifiedTime": iso(time.time()),
                    "FailureReason": f"InternalServerError: the emulator failed: {job.error!r}"}
        return self._in_s3_terms(desc, create, job)

    def _in_s3_terms(self, desc: dict[str, Any], create: dict[str, Any], job: EmulatedJob) -> dict[str, Any]:
        out = dict(desc)
        for key in ECHOED:  # as sent; what the request left out stays out (job.json has local values)
            if key in create:
                out[key] = create[key]
            else:
                out.pop(key, None)
        for key, defaults in SERVICE_DEFAULTS.items():
            if isinstance(out.get(key), dict):
                out[key] = {**dict(defaults), **out[key]}
        for key, value in FLAG_DEFAULTS.items():
            out.setdefault(key, value)
        model = job.job_dir / "output" / "model.tar.gz"
        output_uri = (create.get("OutputDataConfig") or {}).get("S3OutputPath", "")
        # The API model requires ModelArtifacts.S3ModelArtifacts in every response (SDK v3
        # validates it): while the job runs it is where the model will be.
        if output_uri and (job.running or model.exists()):
            out["ModelArtifacts"] = {"S3ModelArtifacts": f"{output_uri.rstrip('/')}/{desc['TrainingJobName']}"
                                                         "/output/model.tar.gz"}
        out["TrainingJobArn"] = self.arn(desc["TrainingJobName"])
        if self._tuning is not None and desc["TrainingJobName"] in self._tuning.parents:
            out["TuningJobArn"] = self._tuning.parents[desc["TrainingJobName"]]
        for key in TIME_FIELDS:
            if isinstance(out.get(key), str):
                out[key] = datetime.fromisoformat(out[key])
        for m in out.get("FinalMetricDataList", []):
            if isinstance(m.get("Timestamp"), str):
                m["Timestamp"] = datetime.fromisoformat(m["Timestamp"])
        for t in out.get("SecondaryStatusTransitions", []):
            for key in ("StartTime", "EndTime"):
                if isinstance(t.get(key), str):
                    t[key] = datetime.fromisoformat(t[key])
        return out

    def stop_training_job(self, TrainingJobName: str) -> dict[str, Any]:
        job = self._lookup(TrainingJobName)
        if job is None:
            raise client_error("ValidationException", f"training job {TrainingJobName!r} does not exist",
                               "StopTrainingJob")
        if not job.running:
            status = self.describe_training_job(TrainingJobName)["TrainingJobStatus"]
            raise client_error("ValidationException", "The request was rejected because the training "
                               f"job is in status {status}.", "StopTrainingJob")
        job.stop.set()  # the supervisor stops the hosts as StopTrainingJob does
        return {}

    # hyperparameter tuning jobs (:mod:`emulator.sdk.tuning_jobs`) ----------------------------
    @property
    def tuning(self) -> TuningJobs:
        if self._tuning is None:
            self._tuning = TuningJobs(self)
        return self._tuning

    def create_hyper_parameter_tuning_job(self, **create: Any) -> dict[str, Any]:
        return self.tuning.create(create)

    def describe_hyper_parameter_tuning_job(self, HyperParameterTuningJobName: str) -> dict[str, Any]:
        return self.tuning.describe(HyperParameterTuningJobName)

    def list_training_jobs_for_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        return self.tuning.list_training_jobs(**request)

    def stop_hyper_parameter_tuning_job(self, HyperParameterTuningJobName: str) -> dict[str, Any]:
        return self.tuning.stop(HyperParameterTuningJobName)

    def list_tags(self, ResourceArn: str, **_: Any) -> dict[str, Any]:
        name = ResourceArn.rsplit("/", 1)[-1]
        for job_name, job in self.jobs.items():
            if job_name.lower() == name:
                create = job.translated.create_request if job.translated else (job.description or {})
                return {"Tags": list(create.get("Tags") or [])}
        return {"Tags": []}

    def wait(self, name: str, timeout: float | None = None) -> EmulatedJob:
        job = self._lookup(name)
        if job is None:
            raise EmulatorError(f"no emulated training job named {name!r}")
        job.done.wait(timeout)
        return job

    def arn(self, name: str) -> str:
        return f"arn:aws:sagemaker:{self.region}:{self.store_account}:training-job/{name.lower()}"

    @property
    def store_account(self) -> str:
        from .s3 import ACCOUNT

        return ACCOUNT

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def refuse(*_: Any, **__: Any) -> Any:
            raise NotImplementedError(f"SageMaker API {name!r} is not emulated (only training jobs are); "
                                      "nothing was sent to AWS")
        return refuse


def print_warnings(job: EmulatedJob, stream: TextIO | None = None) -> None:
    """Print the launcher-quirk warnings of an ended job (``JobResult.warnings``) to ``stream``
    (stderr): the SDK shows only the status, and these say why a green status may be wrong."""
    if job.result is None or not job.result.warnings:
        return
    out = stream or sys.stderr
    for text in job.result.warnings:
        out.write(f"[emulator] {job.result.job_name}: warning: {text}\n")
    out.flush()


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def for_session(boto_session: Any, *, region: str | None, s3_root: str | Path | None, backend: str,
                gpus_per_host: int | None, keep_hosts: bool, stop_grace: float,
                framework_version: str | None, profile: str | None) -> tuple[str, S3Store, EmulatorSageMakerClient]:
    """The emulator's half of an SDK session (v2's and v3's ``EmulatorSession`` both start here):
    the region as the SDK finds it (the argument, the boto session's, then boto3's default region
    — ``AWS_DEFAULT_REGION`` or ``~/.aws/config`` — then the emulator's default), the S3 store
    (a folder of its own, or the per-user default) and the client that runs the jobs."""
    import boto3

    region = (region or getattr(boto_session, "region_name", None) or boto3.session.Session().region_name
              or P.DEFAULT_REGION)
    store = S3Store(Path(s3_root), region=region).open() if s3_root is not None else default_store(region)
    client = EmulatorSageMakerClient(store, region=region, backend=backend, gpus_per_host=gpus_per_host,
                                     keep_hosts=keep_hosts, stop_grace=stop_grace,
                                     framework_version=framework_version, profile=profile)
    return region, store, client
