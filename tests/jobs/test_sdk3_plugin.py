"""SDK v3 through the pytest plugin (``sagemaker_job`` with ModelTrainer keyword arguments) and on the
docker backend: the emulator runs ``ModelTrainer``'s own request, its ``--real`` path submits the
same ``ModelTrainer`` with a real ``Session`` (checked offline: the CreateTrainingJob it would send
equals the emulator's apart from role, image and S3 locations).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from emulator.sdk.versions import installed_major

if installed_major() != 3:
    pytest.skip("needs SageMaker Python SDK v3 (nox -s tests_sdk3)", allow_module_level=True)

TRAIN = """\
import json, os, socket, sys
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
t = torch.ones(1).cuda()
dist.all_reduce(t)
print("RANK " + json.dumps({"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": int(t.item()),
      "host": socket.gethostname(), "argv": sys.argv[1:]}), flush=True)
dist.destroy_process_group()
"""
_RANK = re.compile(r"RANK (?=\{)")


def _source(tmp_path: Path) -> Any:
    from sagemaker.core.training.configs import SourceCode

    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "src" / "train.py").write_text(TRAIN)
    return SourceCode(source_dir=str(tmp_path / "src"), entry_script="train.py")


def _ranks(result: Any) -> list[tuple[int, str]]:
    decoder = json.JSONDecoder()  # ranks' lines may share a line when they print at once
    reports = [decoder.raw_decode(text, m.end())[0]
               for text in (h.log.read_text() for h in result.hosts) for m in _RANK.finditer(text)]
    assert all(r["world"] == len(reports) == r["sum"] for r in reports)
    return sorted((r["rank"], r["host"]) for r in reports)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["process", pytest.param("docker", marks=pytest.mark.docker)])
def test_sagemaker_job_takes_model_trainer_arguments(request: pytest.FixtureRequest, sagemaker_job: Any,
                                                     tmp_path: Path, backend: str) -> None:
    from sagemaker.core.training.configs import Compute
    from sagemaker.train.distributed import Torchrun

    if backend == "docker":
        request.getfixturevalue("docker_ready")
    result = sagemaker_job(source_code=_source(tmp_path), distributed=Torchrun(),
                           compute=Compute(instance_type="ml.g5.12xlarge", instance_count=2),
                           hyperparameters={"epochs": 1}, gpus_per_host=2, backend=backend)
    assert result.status == "Completed", result.failure_reason
    assert result.description["Emulator"]["Backend"] == backend
    assert _ranks(result) == [(0, "algo-1"), (1, "algo-1"), (2, "algo-2"), (3, "algo-2")]


def test_real_path_submits_the_same_model_trainer_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``run_real_v3`` against moto (S3) and a stubbed SageMaker client; compare the CreateTrainingJob it
    sends with the request ModelTrainer sends the emulator for the same keyword arguments."""
    import boto3
    import moto
    from botocore.stub import Stubber
    from sagemaker.core.helper.session_helper import Session
    from sagemaker.core.training.configs import Compute, InputData
    from sm_emulator_fixtures.real import RealSettings, run_real_v3
    from sm_emulator_fixtures.v3 import start_trainer

    from emulator.sdk.v3 import EmulatorSession

    for var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SAGEMAKER_VALIDATE_ROLE", "false")  # moto has no iam:SimulatePrincipalPolicy
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.csv").write_text("1\n")
    kwargs: dict[str, Any] = dict(source_code=_source(tmp_path),
                                  compute=Compute(instance_type="ml.g5.12xlarge", instance_count=2),
                                  hyperparameters={"epochs": 2, "name": "two words"}, environment={"A": "1"},
                                  input_data_config=[InputData(channel_name="train",
                                                               data_source=str(tmp_path / "data"))],
                                  base_job_name="real-path-v3")
    settings = RealSettings(role="arn:aws:iam::123456789012:role/R", bucket="test-bucket", region="us-west-2",
                            image="123.dkr.ecr.us-west-2.amazonaws.com/pt:2.5.1-gpu-py311")
    sent: dict[str, Any] = {}

    emu = EmulatorSession(s3_root=tmp_path / "s3", region="us-west-2")
    try:  # the emulator's request, not run: the same builder with the emulator's session
        emu.emulator_client.on_start.append(lambda job: job.stop.set())
        trainer = start_trainer(kwargs, session=emu, role=settings.role, image=settings.image)
        job = emu.wait_for_emulated_job(trainer._latest_training_job.training_job_name)
        emulated = job.translated.create_request
    finally:
        emu.close()

    with moto.mock_aws():
        boto3.client("s3", region_name="us-west-2").create_bucket(
            Bucket="test-bucket", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
        client = boto3.client("sagemaker", region_name="us-west-2")
        client.meta.events.register("provide-client-params.sagemaker.CreateTrainingJob",
                                    lambda params, **_: sent.update(params))
        stub = Stubber(client)
        stub.add_response("create_training_job", {"TrainingJobArn": "arn:x"})
        done = {"TrainingJobName": "x", "TrainingJobArn": "arn:x", "TrainingJobStatus": "Completed",
                "SecondaryStatus": "Completed", "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
                "ResourceConfig": {"InstanceType": "ml.g5.12xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
                "CreationTime": "2025-01-01T00:00:00Z",
                "OutputDataConfig": {"S3OutputPath": "s3://test-bucket/sagemaker-emulator-tests"},
                "ModelArtifacts": {"S3ModelArtifacts": "s3://test-bucket/none/model.tar.gz"}}
        for _ in range(3):
            stub.add_response("describe_training_job", done)
        stub.activate()

        class Boto(boto3.session.Session):
            def client(self, name: str, *args: Any, **kw: Any) -> Any:  # type: ignore[override]
                return client if name == "sagemaker" else super().client(name, *args, **kw)

        def session_factory(s: RealSettings) -> Any:
            return Session(boto_session=Boto(region_name=s.region), default_bucket=s.bucket)

        result = run_real_v3(dict(kwargs), settings=settings, workdir=tmp_path / "real",
                             session_factory=session_factory, poll=0)

    assert result.real and result.ok and [h.name for h in result.hosts] == ["algo-1", "algo-2"]
    for key in ("HyperParameters", "ResourceConfig", "StoppingCondition", "Environment"):
        assert sent[key] == emulated[key], key
    assert sent["AlgorithmSpecification"] == emulated["AlgorithmSpecification"]  # same image, entrypoint
    names = [c["ChannelName"] for c in emulated["InputDataConfig"]]
    assert [c["ChannelName"] for c in sent["InputDataConfig"]] == names
    assert sent["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"].startswith("s3://test-bucket/")
    assert sent["RoleArn"] == emulated["RoleArn"] == settings.role
    assert os.environ.get("AWS_ACCESS_KEY_ID") != "FOOBARKEY"
