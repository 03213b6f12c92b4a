"""Fidelity options through the SageMaker SDK v2 session: a 2-host job on the docker backend with a
single-object S3 channel (item 8), a ``ShardedByS3Key`` channel (item 6), and the account id
and training image it reports (item 11).
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sagemaker")
pytest.importorskip("moto")

pytestmark = pytest.mark.docker

TRAIN = """\
import json, os, socket
out = {"arn": os.environ["TRAINING_JOB_ARN"], "channels": {}}
for channel in ("single", "sharded"):
    root = os.environ["SM_CHANNEL_" + channel.upper()]
    files = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            files[os.path.relpath(path, root)] = {"link": os.path.islink(path), "text": open(path).read()}
    out["channels"][channel] = files
with open(f"/opt/ml/model/{socket.gethostname()}.json", "w") as f:
    json.dump(out, f)
"""
DLC = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.3.0-cpu-py311-ubuntu20.04-sagemaker"
SHARDS = ["part-0.csv", "part-1.csv", "part-2.csv", "part-3.csv", "part-4.csv"]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, dict[str, Any]]]:
    from sagemaker.inputs import TrainingInput
    from sagemaker.pytorch import PyTorch

    from emulator.backends.docker.backend import DockerBackend
    from emulator.errors import BackendUnavailable
    from emulator.sdk.session import EmulatorSession

    try:  # as conftest's docker_ready (function-scoped), for this module's one job
        DockerBackend().check()
    except BackendUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but the docker backend is unavailable: {exc}")
        pytest.skip(f"docker backend unavailable: {exc}")

    root = tmp_path_factory.mktemp("sdk-fidelity")
    (root / "src").mkdir()
    (root / "src" / "train.py").write_text(TRAIN)
    (root / "data").mkdir()
    for name in SHARDS:
        (root / "data" / name).write_text(name)
    (root / "one.csv").write_text("1,2\n")
    session = EmulatorSession(region="us-west-2", s3_root=root / "s3", backend="docker", stop_grace=2)
    try:
        bucket = session.default_bucket()
        single = session.upload_data(str(root / "one.csv"), bucket=bucket, key_prefix="single")
        sharded = session.upload_data(str(root / "data"), bucket=bucket, key_prefix="sharded")
        est = PyTorch(entry_point="train.py", source_dir=str(root / "src"), role="SageMakerRole",
                      framework_version="2.3.0", py_version="py311", instance_count=2,
                      instance_type="ml.m5.xlarge", image_uri=DLC, sagemaker_session=session)
        est.fit({"single": TrainingInput(single), "sharded": TrainingInput(sharded, distribution="ShardedByS3Key")},
                wait=True, logs="None")
        uri = est.model_data
        bucket_name, _, key = uri[5:].partition("/")
        body = session.boto_session.client("s3").get_object(Bucket=bucket_name, Key=key)["Body"].read()
        with tarfile.open(fileobj=io.BytesIO(body)) as tar:
            seen = {m.name.removesuffix(".json"): json.load(tar.extractfile(m))  # type: ignore[arg-type]
                    for m in tar.getmembers() if m.isfile()}
        yield est, session, seen
    finally:
        session.close()


def test_single_object_channel_is_a_file_in_the_container(fitted: tuple[Any, Any, dict[str, Any]]) -> None:
    """An S3 prefix naming one object gives the channel that object (SageMaker downloads it)."""
    _, _, seen = fitted
    for host in ("algo-1", "algo-2"):
        assert seen[host]["channels"]["single"] == {"one.csv": {"link": False, "text": "1,2\n"}}


def test_sharded_channel_through_the_sdk(fitted: tuple[Any, Any, dict[str, Any]]) -> None:
    """``TrainingInput(distribution="ShardedByS3Key")``: "each instance gets approximately 1/n of the
    number of S3 objects" (API_S3DataSource)."""
    est, _, seen = fitted
    one, two = (sorted(seen[h]["channels"]["sharded"]) for h in ("algo-1", "algo-2"))
    assert not set(one) & set(two) and sorted(one + two) == SHARDS
    channel = next(c for c in est.latest_training_job.describe()["InputDataConfig"] if c["ChannelName"] == "sharded")
    assert channel["DataSource"]["S3DataSource"]["S3DataDistributionType"] == "ShardedByS3Key"


def test_account_id_is_the_sessions(fitted: tuple[Any, Any, dict[str, Any]]) -> None:
    """``TRAINING_JOB_ARN`` in the hosts is the ARN DescribeTrainingJob reports, in the account the
    SDK session's STS identity names."""
    est, session, seen = fitted
    arn = est.latest_training_job.describe()["TrainingJobArn"]
    assert seen["algo-1"]["arn"] == seen["algo-2"]["arn"] == arn
    assert arn.split(":")[4] == session.account_id()


def test_training_image_echoes_the_request_and_emulator_image_says_what_ran(
        fitted: tuple[Any, Any, dict[str, Any]]) -> None:
    """DescribeTrainingJob echoes the requested ``AlgorithmSpecification.TrainingImage``; the DLC
    URI runs the emulator's image here, which ``Emulator.Image`` names."""
    est, session, _ = fitted
    assert est.latest_training_job.describe()["AlgorithmSpecification"]["TrainingImage"] == DLC
    job = session.emulator_client.jobs[est.latest_training_job.name]
    saved = json.loads((Path(job.job_dir) / "job.json").read_text())
    launched = json.loads((Path(job.job_dir) / "launch-spec.json").read_text())
    assert saved["AlgorithmSpecification"]["TrainingImage"] == DLC
    assert saved["Emulator"]["Image"] == launched["hosts"][0]["image"] == "sagemaker-emulator:latest"
