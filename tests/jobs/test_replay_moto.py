"""Issue 33's done-when for SDK v2: a failed ``pytorchddp`` job created through moto replays by name
and by file, fails the same way here, and the report says so.

The job is the real SDK v2 ``PyTorch`` estimator's (``distribution={"pytorchddp": …}``, 2 x
ml.p4d.24xlarge; the SDK records it as smdistributed dataparallel) sent to moto's SageMaker, its
code uploaded to moto's S3 by the SDK. moto records
every job as ``Completed``; the failure SageMaker would record is set on moto's job, in the shape
SageMaker gives it: ``AlgorithmError: `` + the toolkit's ``ExecuteUserScriptError`` text
(``sagemaker_training/errors.py``, ``_CalledProcessError.__str__``: ``ExecuteUserScriptError:\\n
ExitCode 1\\nErrorMessage "…"\\nCommand "…"``). Two replays share the module (one job each, ``ci``
profile, this machine's torch): by name inside moto (code downloaded, channel sampled with
``--sample``), and by file in a fresh process without AWS (``--source-dir``, ``--channel``).
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

from ..conftest import import_or_skip, require_mpi
from ..replay_support import replay_in_process as _replay
from ..replay_support import replayed_job as _job
from ..unit.test_replay import assert_describe_shape, describe

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("replay_moto")]

REGION = "us-west-2"
ACCOUNT = "123456789012"  # moto's default account
BUCKET = "replay-ddp-data"
ERROR = "replay-ddp: rank 1 failed on purpose"
TRAIN = f"""import os
rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK"))
# one string, so one write: mpirun tags each chunk it reads as a line of its own (tests/rank_output.py)
print("rank " + str(rank) + " data " + str(sorted(os.listdir(os.environ["SM_CHANNEL_TRAINING"]))), flush=True)
if rank == "1":
    raise ValueError("{ERROR}")
"""
#: What SageMaker records for this failure (see the module docstring for the format's source).
RECORDED_REASON = ('AlgorithmError: ExecuteUserScriptError:\nExitCode 1\nErrorMessage "ValueError: '
                   f'{ERROR}"\nCommand "mpirun --host algo-1:8,algo-2:8 -np 16 smddprun /opt/conda/bin/python3.10 '
                   '-m mpi4py train.py --epochs 2"')
COMMON = ["--gpus-per-host", "1", "--framework-version", "current", "--profile", "ci", "--backend", "process",
          "--quiet"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The moto job (failed as SageMaker records it) and its replay by name, run while moto is up."""
    moto = import_or_skip("moto")
    import_or_skip("sagemaker")
    require_mpi()
    import boto3
    from moto.sagemaker.models import sagemaker_backends
    from sagemaker import Session
    from sagemaker.pytorch import PyTorch

    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    root = tmp_path_factory.mktemp("replay-moto")
    (root / "src").mkdir()
    (root / "src" / "train.py").write_text(TRAIN)
    (root / "data").mkdir()
    (root / "data" / "a.csv").write_text("1\n")
    with moto.mock_aws():
        boto = boto3.Session(region_name=REGION)
        s3 = boto.client("s3")
        s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
        for key in ("train/a.csv", "train/b.csv", "train/c.csv"):
            s3.put_object(Bucket=BUCKET, Key=key, Body=b"1\n")
        est = PyTorch(entry_point="train.py", source_dir=str(root / "src"), role=f"arn:aws:iam::{ACCOUNT}:role/R",
                      framework_version="2.2.0", py_version="py310", instance_type="ml.p4d.24xlarge",
                      instance_count=2, distribution={"pytorchddp": {"enabled": True}},
                      hyperparameters={"epochs": 2}, sagemaker_session=Session(boto_session=boto))
        est.fit({"training": f"s3://{BUCKET}/train/"}, wait=False, logs=False)
        name = est.latest_training_job.name
        job = sagemaker_backends[ACCOUNT][REGION].training_jobs[name]
        job.training_job_status, job.secondary_status, job.failure_reason = "Failed", "Failed", RECORDED_REASON
        document = describe(name)
        assert_describe_shape(document)
        assert document["TrainingJobStatus"] == "Failed"
        # SDK v2 rewrites pytorchddp into smdistributed dataparallel (sagemaker/pytorch/estimator.py,
        # "rewrite pytorchddp to smdistributed"): that is what SageMaker records and runs
        assert json.loads(document["HyperParameters"]["sagemaker_distributed_dataparallel_enabled"]) is True
        saved = os.environ.get("AWS_DEFAULT_REGION")
        os.environ["AWS_DEFAULT_REGION"] = REGION  # a bare name is read in boto3's configured region
        try:
            code, report = _replay([name, "--sample", "2", "--output-dir", str(root / "by-name"), *COMMON])
        finally:
            if saved is None:
                os.environ.pop("AWS_DEFAULT_REGION")
            else:
                os.environ["AWS_DEFAULT_REGION"] = saved
    yield {"root": root, "name": name, "document": document,
           "by_name": {"code": code, "report": report, "job": _job(root / "by-name")}}


@pytest.fixture(scope="module")
def by_file(recorded: dict[str, Any]) -> dict[str, Any]:
    """The same document as a file (as `aws sagemaker describe-training-job` prints it), replayed
    in a fresh process that has no AWS at all."""
    root = recorded["root"]
    path = root / "job.json"
    path.write_text(json.dumps(recorded["document"]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    done = subprocess.run([sys.executable, "-m", "emulator", "replay", str(path), "--source-dir", str(root / "src"),
                           "--channel", f"training={root / 'data'}", "--output-dir", str(root / "by-file"), *COMMON],
                          capture_output=True, text=True, timeout=300, env=env)
    return {"code": done.returncode, "report": done.stdout + done.stderr, "job": _job(root / "by-file")}


def _fails_the_same_way(replayed: dict[str, Any], name: str) -> None:
    report, job = replayed["report"], replayed["job"]
    assert replayed["code"] == 0, report[-4000:]
    assert job is not None and job["TrainingJobStatus"] == "Failed", report[-4000:]
    assert ERROR in job["FailureReason"]
    assert job["FailureReason"].splitlines()[0] == RECORDED_REASON.splitlines()[0]
    assert f"replay of {name} " in report
    assert "recorded: Failed" in report and "replay:   Failed" in report
    # both first lines, recorded and replayed, side by side (the toolkit's text for a failed mpirun)
    assert report.count("FailureReason: AlgorithmError: ExecuteUserScriptError:") == 2
    assert "reproduced: Failed as recorded, and the FailureReason's first line matches" in report
    assert "exit 0: replay exits 0 iff the replay's TrainingJobStatus equals the recorded one (Failed = Failed)" \
        in report


def test_the_moto_job_replayed_by_name_fails_as_recorded(recorded: dict[str, Any]) -> None:
    replayed = recorded["by_name"]
    _fails_the_same_way(replayed, recorded["name"])
    report = replayed["report"]
    assert "(downloaded)" in report  # the SDK's sourcedir.tar.gz, from moto's S3
    assert f"training: s3://{BUCKET}/train/ → " in report and "(--sample 2)" in report
    logs = "".join(Path(h["Log"]).read_text(errors="replace") for h in replayed["job"]["Emulator"]["Hosts"])
    assert "data ['a.csv', 'b.csv']" in logs  # the first 2 objects listed under the prefix reached the ranks
    assert replayed["job"]["Emulator"]["Profile"] == "ci"


def test_the_moto_job_replayed_by_file_fails_as_recorded(recorded: dict[str, Any], by_file: dict[str, Any]) -> None:
    _fails_the_same_way(by_file, recorded["name"])
    assert f"training: s3://{BUCKET}/train/ → {recorded['root'] / 'data'} (--channel)" in by_file["report"]
