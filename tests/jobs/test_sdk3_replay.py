"""Issue 33's done-when for SDK v3: a failed ``Torchrun`` ``ModelTrainer`` job created through moto
replays by name and by file, fails the same way here, and the report says so.

The document is the one SDK v3 itself sends (``ModelTrainer.train`` → ``TrainingJob.create`` →
moto's CreateTrainingJob; its ``code`` and ``sm_drivers`` channels uploaded to moto's S3 by the
SDK). moto records every job as ``Completed``; the failure SageMaker would record is set on moto's
job: ``AlgorithmError: `` + what the SDK's driver writes to ``/opt/ml/output/failure`` when its
command fails, produced here by the SDK's own ``execute_commands`` (``container_drivers/common/
utils.py``; reference ``sagemaker-sdk-v3.md`` §3). Two replays (one job each, ``ci`` profile, this
machine's torch): by name inside moto (the code channels downloaded, the data channel sampled) and
by file in a fresh process without AWS (every channel a ``--channel`` folder).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emulator.sdk.versions import installed_major

from ..conftest import import_or_skip
from ..replay_support import replay_in_process as _replay
from ..replay_support import replayed_job as _job
from ..unit.test_replay import assert_describe_shape, describe

if installed_major() != 3:
    pytest.skip("needs SageMaker Python SDK v3 (nox -s tests_sdk3)", allow_module_level=True)

pytestmark = pytest.mark.slow

REGION = "us-west-2"
ACCOUNT = "123456789012"  # moto's default account
BUCKET = "replay-v3-data"
IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-sagemaker"
ERROR = "replay-v3: rank 1 failed on purpose"
TRAIN = f"""import os, sys
# one string, so one write: the ranks share the host's stdout (tests/rank_output.py)
print("rank " + os.environ["RANK"] + " argv " + str(sys.argv[1:]) + " data "
      + str(sorted(os.listdir(os.environ["SM_CHANNEL_TRAIN"]))), flush=True)
if os.environ["RANK"] == "1":
    raise ValueError("{ERROR}")
"""
COMMON = ["--gpus-per-host", "1", "--framework-version", "current", "--profile", "ci", "--backend", "process",
          "--quiet"]


def recorded_reason() -> str:
    """What SageMaker records when the v3 torchrun driver's command fails: ``AlgorithmError: `` and
    the failure file, which is the traceback the SDK's ``execute_commands`` returns."""
    from sagemaker.train.container_drivers.common.utils import execute_commands

    code, traceback = execute_commands([sys.executable, "-c", "raise SystemExit(1)"])
    assert code == 1
    return "AlgorithmError: " + traceback


def _download(s3: Any, uri: str, folder: Path) -> None:
    """Every object under ``uri`` into ``folder`` (what ``aws s3 cp --recursive`` does)."""
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    for obj in s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "/").get("Contents", []):
        target = folder / obj["Key"][len(prefix) + 1:]
        target.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(bucket, obj["Key"], str(target))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The moto job (failed as SageMaker records it), its channels as folders, and its replay by name."""
    moto = import_or_skip("moto")
    import boto3
    from moto.sagemaker.models import sagemaker_backends

    root = tmp_path_factory.mktemp("replay-v3")
    (root / "src").mkdir()
    (root / "src" / "train.py").write_text(TRAIN)
    saved = {k: os.environ.get(k) for k in ("AWS_DEFAULT_REGION", "SAGEMAKER_VALIDATE_ROLE")}
    os.environ.update(AWS_DEFAULT_REGION=REGION, SAGEMAKER_VALIDATE_ROLE="false")  # reference §1: moto has no IAM
    try:                                                                           # SimulatePrincipalPolicy
        with moto.mock_aws():
            from sagemaker.core.helper.session_helper import Session
            from sagemaker.core.training.configs import Compute, InputData, SourceCode
            from sagemaker.train import ModelTrainer
            from sagemaker.train.distributed import Torchrun

            boto = boto3.Session(region_name=REGION)
            s3 = boto.client("s3")
            s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
            for key in ("train/a.csv", "train/b.csv"):
                s3.put_object(Bucket=BUCKET, Key=key, Body=b"1\n")
            trainer = ModelTrainer(training_image=IMAGE, role=f"arn:aws:iam::{ACCOUNT}:role/R",
                                   source_code=SourceCode(source_dir=str(root / "src"), entry_script="train.py"),
                                   compute=Compute(instance_type="ml.g5.12xlarge", instance_count=2),
                                   distributed=Torchrun(), hyperparameters={"epochs": 2},
                                   sagemaker_session=Session(boto_session=boto))
            trainer.train(input_data_config=[InputData(channel_name="train", data_source=f"s3://{BUCKET}/train/")],
                          wait=False, logs=False)
            name = trainer._latest_training_job.training_job_name
            job = sagemaker_backends[ACCOUNT][REGION].training_jobs[name]
            reason = recorded_reason()
            job.training_job_status, job.secondary_status, job.failure_reason = "Failed", "Failed", reason
            document = describe(name)
            assert_describe_shape(document)
            assert document["TrainingJobStatus"] == "Failed" and "sagemaker_program" not in document["HyperParameters"]
            uris = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in document["InputDataConfig"]}
            for channel in ("code", "sm_drivers"):
                _download(s3, uris[channel], root / channel)
            code, report = _replay([name, "--sample", "1", "--output-dir", str(root / "by-name"), *COMMON])
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    yield {"root": root, "name": name, "document": document, "reason": reason,
           "by_name": {"code": code, "report": report, "job": _job(root / "by-name")}}


@pytest.fixture(scope="module")
def by_file(recorded: dict[str, Any]) -> dict[str, Any]:
    root = recorded["root"]
    path = root / "job.json"
    path.write_text(json.dumps(recorded["document"]))
    (root / "data").mkdir()
    (root / "data" / "a.csv").write_text("1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    channels = [f"--channel={name}={root / folder}" for name, folder in
                (("code", "code"), ("sm_drivers", "sm_drivers"), ("train", "data"))]
    done = subprocess.run([sys.executable, "-m", "emulator", "replay", str(path), *channels,
                           "--output-dir", str(root / "by-file"), *COMMON],
                          capture_output=True, text=True, timeout=300, env=env)
    return {"code": done.returncode, "report": done.stdout + done.stderr, "job": _job(root / "by-file")}


def _fails_the_same_way(replayed: dict[str, Any], recorded: dict[str, Any]) -> str:
    report, job = replayed["report"], replayed["job"]
    assert replayed["code"] == 0, report[-4000:]
    assert job is not None and job["TrainingJobStatus"] == "Failed", report[-4000:]
    assert job["FailureReason"].splitlines()[0] == recorded["reason"].splitlines()[0]
    assert "returned non-zero exit status 1" in job["FailureReason"]
    assert f"replay of {recorded['name']} " in report
    assert "recorded: Failed" in report and "replay:   Failed" in report
    assert "reproduced: Failed as recorded, and the FailureReason's first line matches" in report
    assert "exit 0: replay exits 0 iff the replay's TrainingJobStatus equals the recorded one (Failed = Failed)" \
        in report
    logs = "".join(Path(h["Log"]).read_text(errors="replace") for h in job["Emulator"]["Hosts"])
    assert ERROR in logs  # the failing rank's own error, in its host's log
    assert "argv ['--epochs', '2']" in logs  # the hyperparameters as the SDK's torchrun driver passes them
    return logs


def test_the_v3_moto_job_replayed_by_name_fails_as_recorded(recorded: dict[str, Any]) -> None:
    replayed = recorded["by_name"]
    logs = _fails_the_same_way(replayed, recorded)
    report = replayed["report"]
    for channel in ("code", "sm_drivers"):
        assert f"    {channel}: s3://" in report  # the code channels, downloaded in full
    assert "(downloaded: all " in report and "(--sample 1)" in report
    assert "data ['a.csv']" in logs  # the first object under the data prefix


def test_the_v3_moto_job_replayed_by_file_fails_as_recorded(recorded: dict[str, Any], by_file: dict[str, Any]) -> None:
    _fails_the_same_way(by_file, recorded)
    assert f"train: s3://{BUCKET}/train/ → {recorded['root'] / 'data'} (--channel)" in by_file["report"]
