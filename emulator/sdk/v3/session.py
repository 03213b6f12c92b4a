"""``EmulatorSession``: a SageMaker SDK v3 ``Session`` whose training jobs run on the emulator.

Pass it as ``sagemaker_session=`` to ``sagemaker.train.ModelTrainer``. ``ModelTrainer.train()``
builds its CreateTrainingJob request exactly as for a real job — ``ContainerEntrypoint`` running
its ``sm_train.sh``, plain-string hyperparameters, the ``code`` and ``sm_drivers`` channels it
uploads, your channels, output path, stopping condition, checkpoint config, environment — and
sends it through ``sagemaker.core.resources.TrainingJob.create``, which takes its client from
``boto_session.client("sagemaker")``. Here that boto3 session is :class:`EmulatorBotoSession`,
whose SageMaker client is :class:`~emulator.sdk.client.EmulatorSageMakerClient`: the job runs on
hosts ``algo-1..N``, each running the request's container command (the SDK's own drivers, which
start ``torchrun``, ``mpirun`` or the script).

Emulated: ``train(wait=..., logs=...)`` (``logs=True`` prints every host's CloudWatch stream
``<job>/algo-N-…`` as the SDK does, from moto's CloudWatch Logs, :mod:`emulator.sdk.cwlogs`),
DescribeTrainingJob (``TrainingJob.get``/``refresh``, ``model_artifacts``, ``failure_reason``), a
failed job raising the SDK's own ``FailedStatusError`` with the emulator's ``FailureReason``,
``TrainingJob.stop()``, role validation and ``get_execution_role()`` (:mod:`emulator.sdk.aws`: the
caller is an assumed role, every action allowed), ``default_bucket()`` and uploads (S3 through moto
backed by a local folder, :mod:`emulator.sdk.s3`). Launcher quirk warnings of a finished job
(``JobResult.warnings``) are printed to stderr.

Not emulated: every other SageMaker API (it raises ``NotImplementedError``), IAM permissions,
CloudWatch metrics, SageMaker-managed MLflow, and any call to AWS: nothing leaves the machine, no
account or credentials are needed. ``train(logs=True)`` reads CloudWatch Logs through a client the
SDK makes from the default region (``AWS_DEFAULT_REGION`` or ``~/.aws/config``), as on AWS; the
emulator writes each job's streams in that region and the session's.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any, TextIO

import boto3
from sagemaker.core.helper.session_helper import Session

from ...backends import DEFAULT_BACKEND
from ...inhost import protocol as P
from ..aws import ROLE_ARN, answer_identity
from ..client import EmulatedJob, EmulatorSageMakerClient, for_session, print_warnings
from ..cwlogs import LogFeed

#: The services whose identity questions the emulator answers itself (see :mod:`emulator.sdk.aws`).
IDENTITY_SERVICES = ("sts", "iam")


class EmulatorBotoSession(boto3.session.Session):
    """A boto3 session whose ``client("sagemaker")`` is the emulator's and whose STS/IAM clients
    answer identity questions as :mod:`emulator.sdk.aws` says; every other client is boto3's own
    (answered by moto while the emulator's S3 store is open)."""

    def __init__(self, sagemaker_client: EmulatorSageMakerClient, *, region_name: str) -> None:
        super().__init__(region_name=region_name)
        self.emulator_client = sagemaker_client

    def client(self, service_name: str, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        if service_name == "sagemaker":
            return self.emulator_client
        made = super().client(service_name, *args, **kwargs)  # type: ignore[call-overload]
        if service_name in IDENTITY_SERVICES:
            answer_identity(made)
        return made


class EmulatorSession(Session):
    """A v3 ``Session`` that needs no AWS account and runs training jobs on the emulator."""

    def __init__(self, boto_session: Any = None, *, region: str | None = None,
                 s3_root: str | Path | None = None, backend: str = DEFAULT_BACKEND,
                 gpus_per_host: int | None = None, keep_hosts: bool = False,
                 stop_grace: float = P.STOP_GRACE, default_bucket: str | None = None,
                 framework_version: str | None = None, profile: str | None = None,
                 echo: bool = False, warnings_to: TextIO | None = None, **session_kwargs: Any) -> None:
        """``echo``: print each host's log lines to stdout with an ``[algo-N]`` prefix while a job
        runs (``python -m emulator launch`` does; the SDK's own ``logs=True`` output goes through
        its logger, which prints only when logging is configured). ``warnings_to``: where quirk
        warnings go (stderr)."""
        region, self.s3_store, self.emulator_client = for_session(
            boto_session, region=region, s3_root=s3_root, backend=backend, gpus_per_host=gpus_per_host,
            keep_hosts=keep_hosts, stop_grace=stop_grace, framework_version=framework_version, profile=profile)
        self.emulator_client.on_start.append(self._feed_logs)
        self.emulator_client.on_finish.append(self._finished)
        self._feeds: dict[str, LogFeed] = {}
        self._lock = threading.Lock()
        self._warnings_to = warnings_to
        self._echo = echo
        super().__init__(boto_session=EmulatorBotoSession(self.emulator_client, region_name=region),
                         sagemaker_client=self.emulator_client, default_bucket=default_bucket,
                         **session_kwargs)

    # identity ------------------------------------------------------------------------------
    def get_caller_identity_arn(self) -> str:
        """The emulator's execution role (also what ``get_execution_role()`` returns)."""
        return ROLE_ARN

    # jobs ----------------------------------------------------------------------------------
    def _feed_logs(self, job: EmulatedJob) -> None:
        assert job.translated is not None
        request = job.translated.request
        logs = {h: job.job_dir / "logs" / f"{h}.log" for h in request.hosts}
        regions = [self.boto_region_name, boto3.session.Session().region_name or self.boto_region_name]
        feed = LogFeed(request.job_name, logs, regions=regions, started=job.created,
                       echo_to=sys.stdout if self._echo else None).start()
        with self._lock:
            self._feeds[request.job_name] = feed

    def _finished(self, job: EmulatedJob) -> None:
        assert job.translated is not None
        name = job.translated.request.job_name
        with self._lock:
            feed = self._feeds.pop(name, None)
        if feed is not None:
            feed.close()
        print_warnings(job, self._warnings_to)

    def wait_for_emulated_job(self, job_name: str, timeout: float | None = None) -> EmulatedJob:
        """Block until the emulated job has ended (its :class:`~emulator.job.result.JobResult` is then
        ``.result``)."""
        job = self.emulator_client.wait(job_name, timeout)
        if job.running:
            raise TimeoutError(f"{job_name} still running after {timeout} s")
        return job

    def close(self) -> None:
        """Write what moto holds to the S3 folder and stop answering AWS calls here."""
        with self._lock:
            feeds, self._feeds = list(self._feeds.values()), {}
        for feed in feeds:
            feed.close()
        self.s3_store.close()



