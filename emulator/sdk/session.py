"""``EmulatorSession``: a SageMaker SDK v2 ``Session`` whose training jobs run on the emulator.

Pass it as ``sagemaker_session=`` to ``sagemaker.pytorch.PyTorch`` (or any ``Framework``
estimator). The SDK builds its CreateTrainingJob request exactly as for a real job — hyperparameters
with the ``sagemaker_*`` keys, the ``sourcedir.tar.gz`` it uploads, channels, output path,
stopping condition, checkpoint config, environment — and hands it to ``sagemaker_client``, which
here is :class:`~emulator.sdk.client.EmulatorSageMakerClient`: the job runs on hosts ``algo-1..N``.

Emulated: ``fit(wait=..., logs=...)`` (host logs stream with an ``[algo-N]`` prefix),
``describe()``, ``latest_training_job``, ``model_data``, ``Estimator.attach()``, ``stop()``,
``default_bucket()``, ``upload_data``, ``get_execution_role()`` (a fixed role ARN), S3 through
moto backed by a local folder (:mod:`emulator.sdk.s3`), ``metric_definitions`` read from
the hosts' logs (``FinalMetricDataList``; ``training_job_analytics`` through moto's
CloudWatch, :mod:`emulator.sdk.cwmetrics`). A failed job raises the SDK's own
``UnexpectedStatusException`` carrying the emulator's ``FailureReason``.
``HyperparameterTuner.fit()`` runs its training jobs on the emulator (:mod:`emulator.sdk.tuning_jobs`);
``wait_for_tuning_job`` waits for the tuning thread instead of polling every 5 s.

Not emulated: every other SageMaker API (endpoints, processing, pipelines: they raise
``NotImplementedError``), SageMaker's instance metrics (CPU, GPU, memory), IAM permission
checks, and any AWS call at all — nothing leaves the machine, no AWS account or credentials are needed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import boto3
from sagemaker.session import Session, _check_job_status

from ..backends import DEFAULT_BACKEND
from ..console import RAW_SUFFIX, LogTailer
from ..inhost import protocol as P
from .client import for_session
from .s3 import ACCOUNT

#: The role every emulated job reports; any role ARN a launcher passes is accepted.
EMULATOR_ROLE = f"arn:aws:iam::{ACCOUNT}:role/SageMakerEmulatorRole"
#: How often ``logs_for_job`` looks at the job while it waits.
WAIT_POLL = 0.2


class EmulatorSession(Session):
    """A ``sagemaker.Session`` that needs no AWS account and runs training jobs on the emulator."""

    def __init__(self, boto_session: Any = None, *, region: str | None = None,
                 s3_root: str | Path | None = None, backend: str = DEFAULT_BACKEND,
                 gpus_per_host: int | None = None, keep_hosts: bool = False,
                 stop_grace: float = P.STOP_GRACE, default_bucket: str | None = None,
                 framework_version: str | None = None, profile: str | None = None,
                 **session_kwargs: Any) -> None:
        region, self.s3_store, self.emulator_client = for_session(
            boto_session, region=region, s3_root=s3_root, backend=backend, gpus_per_host=gpus_per_host,
            keep_hosts=keep_hosts, stop_grace=stop_grace, framework_version=framework_version, profile=profile)
        super().__init__(boto_session=boto_session or boto3.session.Session(region_name=region),
                         sagemaker_client=self.emulator_client, default_bucket=default_bucket,
                         **session_kwargs)

    # identity ------------------------------------------------------------------------------
    def get_caller_identity_arn(self) -> str:
        return EMULATOR_ROLE

    def expand_role(self, role: str) -> str:
        return role if "/" in role else f"arn:aws:iam::{ACCOUNT}:role/{role}"

    # waiting and logs ----------------------------------------------------------------------
    def logs_for_job(self, job_name: str, wait: bool = False, poll: int = 10, log_type: Any = "All",
                     timeout: int | None = None) -> None:
        """Print the hosts' logs (``[algo-N]`` prefix) and, with ``wait``, follow them to the end."""
        echo = log_type not in ("None", False, None)
        job = self.emulator_client.wait(job_name, timeout=0)
        logs = job.job_dir / "logs"
        request = job.translated.request if job.translated else None
        hosts = request.hosts if request else sorted(
            p.stem for p in logs.glob("algo-*.log") if not p.name.endswith(RAW_SUFFIX))
        tailer = LogTailer({h: logs / f"{h}.log" for h in hosts}, stream=sys.stdout, echo=echo)
        if wait:
            tailer.start()
            self._join(job_name, timeout)
        tailer.stop()
        desc = self.describe_training_job(job_name)
        if wait:
            if echo:
                seconds = desc.get("BillableTimeInSeconds")
                if seconds is not None:
                    print(f"Training seconds: {desc.get('TrainingTimeInSeconds')}")
                    print(f"Billable seconds: {seconds}")
            _check_job_status(job_name, desc, "TrainingJobStatus")

    def wait_for_job(self, job: str, poll: int = 5) -> dict[str, Any]:
        self._join(job, None)
        desc: dict[str, Any] = self.describe_training_job(job)
        _check_job_status(job, desc, "TrainingJobStatus")
        return desc

    def wait_for_tuning_job(self, job: str, poll: int = 5) -> dict[str, Any]:
        """As the SDK's: wait for the tuning job, then raise its ``UnexpectedStatusException`` if
        it did not complete (without the SDK's 5-second polling)."""
        try:
            self.emulator_client.tuning.wait(job)
        except KeyboardInterrupt:  # as for a training job: Ctrl-C stops what it started
            self.emulator_client.stop_hyper_parameter_tuning_job(HyperParameterTuningJobName=job)
            self.emulator_client.tuning.wait(job)
            raise
        desc: dict[str, Any] = self.describe_tuning_job(job)
        _check_job_status(job, desc, "HyperParameterTuningJobStatus")
        return desc

    def _join(self, job_name: str, timeout: float | None) -> None:
        job = self.emulator_client.wait(job_name, timeout=0)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while job.running:
                if deadline is not None and time.monotonic() > deadline:
                    break
                job.done.wait(WAIT_POLL)
        except KeyboardInterrupt:
            self.emulator_client.stop_training_job(TrainingJobName=job_name)
            job.done.wait()
            raise

    def close(self) -> None:
        """Write what moto holds to the S3 folder and stop answering S3 here."""
        self.s3_store.close()
