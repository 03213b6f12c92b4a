"""SDK v3: an unchanged ``ModelTrainer`` runs on the emulator through ``emulator.sdk.v3.EmulatorSession``.

Expected values come from the SDK itself (its drivers' ``hyperparameters_to_cli_args``, its own
``FailedStatusError``, its own CloudWatch log reader and DescribeTrainingJob model) or from the
reference ``sagemaker-sdk-v3.md``; nothing calls AWS (moto answers S3/STS/IAM/Logs).
Three small jobs (no torch): 1 host that completes, 2 hosts where algo-2 fails, and one refused.
"""

from __future__ import annotations

import json
import logging
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emulator.sdk.versions import installed_major

from ..sdk3_support import emulator_session

if installed_major() != 3:
    pytest.skip("needs SageMaker Python SDK v3 (nox -s tests_sdk3)", allow_module_level=True)

IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-sagemaker"
HYPERPARAMETERS = {"epochs": 2, "note": "hello world", "layers": [1, 2]}
TRAIN = """\
import json, os, sys
# one string each, so one write: the toolkit re-prints what it reads in chunks (tests/rank_output.py)
print(f"argv {json.dumps(sys.argv[1:])}", flush=True)
print(f"channel {json.dumps(sorted(os.listdir(os.environ['SM_CHANNEL_TRAIN'])))}", flush=True)
print("epoch 1 Loss: 0.42", flush=True)
if os.environ["SM_CURRENT_HOST"] in os.environ.get("FAIL_ON", "").split(","):
    raise SystemExit("failing on purpose on " + os.environ["SM_CURRENT_HOST"])
with open(os.path.join(os.environ["SM_MODEL_DIR"], "weights.txt"), "w") as f:
    f.write("trained on " + os.environ["SM_CURRENT_HOST"])
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sdk3")
    (root / "src").mkdir()
    (root / "src" / "train.py").write_text(TRAIN)
    (root / "data" / "nested").mkdir(parents=True)
    (root / "data" / "a.csv").write_text("1,2\n")
    (root / "data" / "nested" / "b.csv").write_text("3,4\n")
    return root


@pytest.fixture(scope="module")
def session(project: Path) -> Iterator[Any]:
    with emulator_session(project / "s3") as sess:
        yield sess


def _trainer(project: Path, session: Any, **overrides: Any) -> Any:
    from sagemaker.core.training.configs import Compute, SourceCode
    from sagemaker.train import ModelTrainer

    kwargs: dict[str, Any] = {
        "training_image": IMAGE, "role": "arn:aws:iam::123456789012:role/SomeRole",
        "source_code": SourceCode(source_dir=str(project / "src"), entry_script="train.py"),
        "compute": Compute(instance_type="ml.m5.xlarge", instance_count=1),
        "hyperparameters": HYPERPARAMETERS, "sagemaker_session": session}
    kwargs.update(overrides)
    return ModelTrainer(**kwargs)


def _input(project: Path) -> list[Any]:
    from sagemaker.core.training.configs import InputData

    return [InputData(channel_name="train", data_source=str(project / "data"))]


@pytest.fixture(scope="module")
def completed(project: Path, session: Any) -> tuple[Any, list[logging.LogRecord]]:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("sagemaker.core.resources")  # where TrainingJob.wait(logs=True) prints
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        from sagemaker.core.shapes import MetricDefinition

        trainer = _trainer(project, session).with_metric_definitions(
            [MetricDefinition(name="loss", regex="Loss: ([0-9.]+)")])
        trainer.train(input_data_config=_input(project), wait=True, logs=True)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return trainer, records


def test_the_job_completes_and_its_model_is_in_the_s3_folder(completed: Any, session: Any) -> None:
    trainer, _ = completed
    job = trainer._latest_training_job
    assert job.training_job_status == "Completed"
    uri = job.model_artifacts.s3_model_artifacts
    assert uri.startswith("s3://") and uri.endswith(f"/{job.training_job_name}/output/model.tar.gz")
    local = session.s3_store.local_path(uri)
    with tarfile.open(local) as tar:
        assert tar.extractfile("weights.txt").read() == b"trained on algo-1"  # type: ignore[union-attr]
    bucket, key = uri[5:].split("/", 1)  # and through boto3 (moto)
    assert session.boto_session.client("s3").head_object(Bucket=bucket, Key=key)["ContentLength"] > 0


def test_the_script_sees_the_hyperparameters_and_channel_as_v3_sends_them(completed: Any, session: Any) -> None:
    from sagemaker.train.container_drivers.common.utils import hyperparameters_to_cli_args

    trainer, _ = completed
    name = trainer._latest_training_job.training_job_name
    log = (session.emulator_client.wait(name).job_dir / "logs" / "algo-1.log").read_text()
    desc = session.emulator_client.describe_training_job(TrainingJobName=name)
    sent = desc["HyperParameters"]  # what ModelTrainer sent: plain strings, no sagemaker_* keys
    assert sent["note"] == "hello world" and not any(k.startswith("sagemaker_") for k in sent)
    expected_argv = hyperparameters_to_cli_args(sent)  # the SDK's own driver code is the oracle
    assert f"argv {json.dumps(expected_argv)}" in log
    assert 'channel ["a.csv", "nested"]' in log  # the local folder's layout, uploaded and downloaded


def test_with_metric_definitions_fills_final_metric_data_list(completed: Any) -> None:
    """v3's ``with_metric_definitions`` sends ``MetricDefinitions``; the job's value comes back through
    the SDK's own ``TrainingJob`` (its DescribeTrainingJob model parses ``FinalMetricDataList``)."""
    trainer, _ = completed
    job = trainer._latest_training_job
    job.refresh()
    assert [(m.metric_name, m.value) for m in job.final_metric_data_list] == [("loss", 0.42)]


def test_logs_true_streams_every_host_from_cloudwatch(completed: Any) -> None:
    trainer, records = completed
    name = trainer._latest_training_job.training_job_name
    texts = [r.getMessage() for r in records]
    streamed = [t for t in texts if t.startswith(f"{name}/algo-1-")]  # the SDK's "<stream>:\n<message>"
    assert any(t.endswith("\nStarting training script") for t in streamed)  # sm_train.sh's first line
    assert any("hello world" in t for t in streamed)
    assert "Final Resource Status: [bold]Completed" in texts


def test_a_failing_host_raises_failed_status_error_with_its_reason(project: Path, session: Any) -> None:
    from sagemaker.core.training.configs import Compute
    from sagemaker.core.utils.exceptions import FailedStatusError

    trainer = _trainer(project, session, compute=Compute(instance_type="ml.m5.xlarge", instance_count=2),
                       environment={"FAIL_ON": "algo-2"})
    with pytest.raises(FailedStatusError) as err:
        trainer.train(input_data_config=_input(project), wait=True, logs=False)
    job = trainer._latest_training_job
    desc = json.loads((session.emulator_client.wait(job.training_job_name).job_dir / "job.json").read_text())
    assert desc["Emulator"]["FirstFailure"]["Host"] == "algo-2"
    reason = job.failure_reason
    # the v3 driver writes its traceback to /opt/ml/output/failure; SageMaker prefixes AlgorithmError
    assert reason.startswith("AlgorithmError: ") and "returned non-zero exit status 1" in reason
    assert reason == desc["FailureReason"] and reason in str(err.value)


def test_an_instance_type_the_emulator_refuses_fails_before_any_host(project: Path, session: Any) -> None:
    from botocore.exceptions import ClientError
    from sagemaker.core.training.configs import Compute

    trainer = _trainer(project, session, compute=Compute(instance_type="ml.nope.xlarge", instance_count=2),
                       base_job_name="refused-v3")
    with pytest.raises(ClientError, match=r"ValidationException.*ResourceConfig.InstanceType: unknown instance"):
        trainer.train(input_data_config=_input(project), wait=False, logs=False)
    assert not list((project / "s3").glob("*/refused-v3/*/job.json"))


def test_an_empty_s3_prefix_is_refused_at_create_training_job(project: Path, session: Any) -> None:
    """SageMaker refuses CreateTrainingJob when a channel's S3 prefix lists no objects (text as real
    jobs report it; see tests/jobs/test_s3_channels.py); ModelTrainer raises the ClientError before any host."""
    from botocore.exceptions import ClientError
    from sagemaker.core.training.configs import InputData

    bucket = session.default_bucket()
    session.upload_data(str(project / "data"), bucket=bucket, key_prefix="datasets/mnist-train")
    typo = f"s3://{bucket}/datasets/mnist-trian/"
    trainer = _trainer(project, session, base_job_name="empty-prefix-v3")
    with pytest.raises(ClientError) as info:
        trainer.train(input_data_config=[InputData(channel_name="train", data_source=typo)], wait=False, logs=False)
    err = info.value.response["Error"]
    assert err["Code"] == "ValidationException" and info.value.operation_name == "CreateTrainingJob"
    assert (f'No S3 objects found under S3 URL "{typo}" given in input data source. Please ensure that the bucket '
            "exists in the selected region (us-west-2), that objects exist under that S3 prefix, and that the role "
            f'"arn:aws:iam::123456789012:role/SomeRole" has "s3:ListBucket" permissions on bucket "{bucket}".'
            ) in err["Message"]
    assert not list((project / "s3").glob("*/empty-prefix-v3*/**/job.json"))


def test_get_execution_role_and_role_validation_need_no_aws(session: Any) -> None:
    from sagemaker.core.helper.iam_role_resolver import resolve_and_validate_role
    from sagemaker.core.helper.session_helper import get_execution_role

    role = get_execution_role(session)
    assert role.startswith("arn:aws:iam::") and ":role/" in role
    assert resolve_and_validate_role("SomeRole", sagemaker_session=session).endswith(":role/SomeRole")
