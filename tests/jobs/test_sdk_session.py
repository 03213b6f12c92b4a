"""EmulatorSession: an SDK v2 PyTorch estimator runs on the emulator; nothing calls AWS.

Two full jobs in all (one that completes, one that fails), both 1-host: the SDK seam does not
depend on the host count (2-host SDK jobs run in tests/jobs/test_launch.py).
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..conftest import import_or_skip

import_or_skip("sagemaker")
import_or_skip("moto")

# What the script saw goes into model.tar.gz: the toolkit re-prints a script's output in the
# chunks it reads, so a line printed in several writes may reach the log split.
TRAIN = """\
import json, os, sys, time
print(f"hello from {os.environ['SM_CURRENT_HOST']}", flush=True)
for epoch, loss in enumerate((0.7, 0.5, 0.25)):  # LOSSES
    print(f"epoch={epoch} train_loss={loss}", flush=True)
print("val_accuracy=0.9", flush=True)
time.sleep(1.5)
channels = {ch: sorted(os.listdir(os.environ["SM_CHANNEL_" + ch.upper()]))
            for ch in json.loads(os.environ["SM_CHANNELS"])}
if os.environ.get("FAIL_ME"):
    raise ValueError("boom requested by the test")
with open(os.path.join(os.environ["SM_MODEL_DIR"], "seen.json"), "w") as f:
    json.dump({"argv": sys.argv[1:], "channels": channels}, f)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "weights.txt"), "w") as f:
    f.write("trained")
"""


#: What TRAIN prints as its losses; the definitions the estimator passes (one mistyped on purpose).
LOSSES = (0.7, 0.5, 0.25)
METRICS = [{"Name": "train:loss", "Regex": "train_loss=([0-9.]+)"},
           {"Name": "val:acc", "Regex": "val_acc=([0-9.]+)"}]


class TimedStdout(io.StringIO):
    """Records when each line was written."""

    def __init__(self) -> None:
        super().__init__()
        self.stamps: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.stamps.append((time.time(), text))
        return super().write(text)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sdk")
    (root / "src").mkdir()
    (root / "src" / "train.py").write_text(TRAIN)
    (root / "local-data").mkdir()
    (root / "local-data" / "a.csv").write_text("1,2\n")
    (root / "s3-data").mkdir()
    (root / "s3-data" / "b.csv").write_text("3,4\n")
    return root


@pytest.fixture(scope="module")
def session(project: Path) -> Iterator[Any]:
    from emulator.sdk.session import EmulatorSession

    sess = EmulatorSession(region="us-west-2", s3_root=project / "s3")
    yield sess
    sess.close()


def _estimator(project: Path, session: Any, **extra: Any) -> Any:
    from sagemaker.pytorch import PyTorch

    return PyTorch(entry_point="train.py", source_dir=str(project / "src"), role="SageMakerRole",
                   framework_version="2.3.0", py_version="py311", instance_count=1,
                   instance_type="ml.m5.xlarge", hyperparameters={"epochs": 3, "lr": 0.1},
                   sagemaker_session=session, **extra)


@pytest.fixture(scope="module")
def fitted(project: Path, session: Any) -> tuple[Any, TimedStdout, float]:
    s3_uri = session.upload_data(str(project / "s3-data"), key_prefix="datasets/train")
    est = _estimator(project, session, metric_definitions=METRICS)
    out = TimedStdout()
    saved, sys.stdout = sys.stdout, out
    try:
        est.fit({"train": s3_uri, "extra": f"file://{project / 'local-data'}"}, wait=True, logs=True)
    finally:
        sys.stdout = saved
    return est, out, time.time()


def test_fit_runs_the_request_the_sdk_built(fitted: tuple[Any, TimedStdout, float]) -> None:
    est, out, _ = fitted
    text = out.getvalue()
    assert "hello from algo-1" in text  # the host's log reached the console
    with tarfile.open(est.sagemaker_session.s3_store.local_path(est.model_data)) as tar:
        seen = json.load(tar.extractfile("seen.json"))  # type: ignore[arg-type]
    assert seen == {"argv": ["--epochs", "3", "--lr", "0.1"], "channels": {"extra": ["a.csv"], "train": ["b.csv"]}}
    desc = est.latest_training_job.describe()
    hps = desc["HyperParameters"]
    assert hps["epochs"] == "3" and hps["lr"] == "0.1"
    assert hps["sagemaker_program"] == '"train.py"'
    submit = hps["sagemaker_submit_directory"]
    assert submit.startswith('"s3://') and "sourcedir.tar.gz" in submit


def test_describe(fitted: tuple[Any, TimedStdout, float]) -> None:
    est, _, _ = fitted
    desc = est.latest_training_job.describe()
    assert desc["TrainingJobStatus"] == "Completed"
    assert desc["SecondaryStatus"] == "Completed"
    assert desc["TrainingJobArn"].startswith("arn:aws:sagemaker:us-west-2:")
    assert desc["ResourceConfig"]["InstanceType"] == "ml.m5.xlarge"
    assert desc["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"].startswith("s3://")
    assert desc["OutputDataConfig"]["S3OutputPath"].startswith("s3://")
    assert desc["TrainingEndTime"] >= desc["TrainingStartTime"]
    assert [t["Status"] for t in desc["SecondaryStatusTransitions"]][-1] == "Completed"


def test_metric_definitions_fill_final_metric_data_list(fitted: tuple[Any, TimedStdout, float]) -> None:
    """The regexes read the host's log: the last loss TRAIN printed is the final value (the field's
    shape is botocore's ``MetricData``); the mistyped definition has no entry and is named with the
    log line nearest to it."""
    import botocore.session

    est, _, _ = fitted
    desc = est.latest_training_job.describe()
    assert desc["AlgorithmSpecification"]["MetricDefinitions"] == METRICS  # echoed as sent
    final = desc["FinalMetricDataList"]
    assert [(m["MetricName"], m["Value"]) for m in final] == [("train:loss", LOSSES[-1])]
    assert desc["TrainingStartTime"] <= final[0]["Timestamp"] <= desc["TrainingEndTime"]
    model = botocore.session.get_session().get_service_model("sagemaker")
    shape = model.shape_for("DescribeTrainingJobResponse").members["FinalMetricDataList"]
    assert set(final[0]) == set(shape.member.members)  # MetricName, Value, Timestamp
    record = json.loads((Path(est.sagemaker_session.emulator_client.wait(est.latest_training_job.name).job_dir)
                         / "job.json").read_text())
    unmatched = record["Emulator"]["Metrics"]["Unmatched"]
    assert [u["MetricName"] for u in unmatched] == ["val:acc"]
    assert unmatched[0]["NearestLine"] == {"Host": "algo-1", "Line": "val_accuracy=0.9"}


def test_training_job_analytics_reads_the_values(fitted: tuple[Any, TimedStdout, float], project: Path) -> None:
    """The SDK's own ``TrainingJobAnalytics`` (CloudWatch ``GetMetricStatistics``, ``Average``) sees
    every value TRAIN printed: one day-long period averages them; a new launcher's session (attach)
    sees the same, not twice."""
    from sagemaker.analytics import TrainingJobAnalytics

    from emulator.sdk.session import EmulatorSession

    est, _, _ = fitted
    name = est.latest_training_job.name
    frame = TrainingJobAnalytics(name, metric_names=["train:loss"], sagemaker_session=est.sagemaker_session,
                                 period=86_400).dataframe()
    assert list(frame["metric_name"]) == ["train:loss"]
    assert frame["value"].iloc[0] == pytest.approx(sum(LOSSES) / len(LOSSES))
    fresh = EmulatorSession(region="us-west-2", s3_root=project / "s3")
    try:
        fresh.emulator_client.jobs.clear()
        again = TrainingJobAnalytics(name, sagemaker_session=fresh, period=86_400).dataframe()
        assert list(again["metric_name"]) == ["train:loss"]  # val:acc: no values
        assert again["value"].iloc[0] == pytest.approx(sum(LOSSES) / len(LOSSES))
    finally:
        fresh.close()


def test_model_data_is_in_s3_and_on_disk(fitted: tuple[Any, TimedStdout, float], session: Any) -> None:
    est, _, _ = fitted
    uri = est.model_data
    assert uri.startswith("s3://") and uri.endswith(f"/{est.latest_training_job.name}/output/model.tar.gz")
    bucket, _, key = uri[5:].partition("/")
    body = session.boto_session.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        assert tar.extractfile("weights.txt").read() == b"trained"  # type: ignore[union-attr]
    assert session.s3_store.local_path(uri).is_file()


def test_logs_stream_during_fit(fitted: tuple[Any, TimedStdout, float]) -> None:
    est, out, _ = fitted
    desc = est.latest_training_job.describe()
    end = desc["TrainingEndTime"].timestamp()
    hello = [t for t, line in out.stamps if line.startswith("[algo-1]") and "hello from" in line]
    assert hello, out.getvalue()[-2000:]
    assert hello[0] < end - 1.0, "the host's first line reached the console only after the job ended"


def test_attach_to_a_finished_job(fitted: tuple[Any, TimedStdout, float], project: Path) -> None:
    from sagemaker.pytorch import PyTorch

    from emulator.sdk.session import EmulatorSession

    est, _, _ = fitted
    fresh = EmulatorSession(region="us-west-2", s3_root=project / "s3")  # as from a new launcher
    try:
        fresh.emulator_client.jobs.clear()
        attached = PyTorch.attach(est.latest_training_job.name, sagemaker_session=fresh)
        assert attached.model_data == est.model_data
        assert attached.hyperparameters()["epochs"] == "3"
        assert attached.instance_count == 1
    finally:
        fresh.close()


def test_failed_job_raises_unexpected_status(project: Path, session: Any) -> None:
    from sagemaker.exceptions import UnexpectedStatusException

    est = _estimator(project, session, environment={"FAIL_ME": "1"})
    with pytest.raises(UnexpectedStatusException) as info:
        est.fit(wait=True, logs="None")
    message = str(info.value)
    assert "Failed" in message
    assert "AlgorithmError" in message and "boom requested by the test" in message
    assert est.latest_training_job.describe()["FailureReason"] in message


def test_translate_maps_s3_and_file_locations(tmp_path: Path) -> None:
    from emulator.sdk.s3 import S3Store
    from emulator.sdk.translate import from_create_training_job

    store = S3Store(tmp_path / "s3").open()
    try:
        src = tmp_path / "src"
        src.mkdir()
        (src / "train.py").write_text("print(1)\n")
        with tarfile.open(tmp_path / "sourcedir.tar.gz", "w:gz") as tar:
            tar.add(src / "train.py", arcname="train.py")
        store.ensure_bucket("bkt")
        store.client.upload_file(str(tmp_path / "sourcedir.tar.gz"), "bkt", "job/source/sourcedir.tar.gz")
        store.client.put_object(Bucket="bkt", Key="data/x.csv", Body=b"1")
        create = {
            "TrainingJobName": "t-1",
            "HyperParameters": {"sagemaker_program": '"train.py"',
                                "sagemaker_submit_directory": '"s3://bkt/job/source/sourcedir.tar.gz"'},
            "AlgorithmSpecification": {
                "TrainingImage": "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.3.0-gpu-py311",
                "TrainingInputMode": "File"},
            "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
            "InputDataConfig": [
                {"ChannelName": "train", "DataSource": {"S3DataSource": {
                    "S3DataType": "S3Prefix", "S3Uri": "s3://bkt/data", "S3DataDistributionType": "FullyReplicated"}}},
                {"ChannelName": "local", "DataSource": {"FileDataSource": {"FileUri": f"file://{src}"}}},
            ],
            "OutputDataConfig": {"S3OutputPath": "s3://bkt/out"},
            "StoppingCondition": {"MaxRuntimeInSeconds": 600},
            "CheckpointConfig": {"S3Uri": "s3://bkt/ckpt", "LocalPath": "/opt/ml/checkpoints"},
            "Environment": {"A": "1"},
        }
        t = from_create_training_job(create, store=store, region="us-west-2")
        r = t.request
        assert r.hyperparameters == create["HyperParameters"]
        assert (r.source_dir / "train.py").is_file()
        assert r.host_count == 2 and r.instance_groups[0].instance_type == "ml.p4d.24xlarge"
        assert r.channels[0].path == store.root / "bkt" / "data" and (r.channels[0].path / "x.csv").is_file()
        assert r.channels[1].path == src
        assert r.output_path == store.root / "bkt" / "out"
        assert r.checkpoint_dir == store.root / "bkt" / "ckpt"
        assert r.max_runtime_seconds == 600 and dict(r.environment) == {"A": "1"}
        assert r.image_uri and r.image_uri.endswith("2.3.0-gpu-py311")
        for d in t.temp_dirs:
            import shutil

            shutil.rmtree(d)
    finally:
        store.close()
