"""The pytest plugin, from a user's test repo (pytester), and the ``--real`` path without AWS."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from emulator.cache import cache_dir

from ..conftest import import_or_skip

pytest_plugins = ["pytester"]

TRAIN_OK = """\
import json, os, time
start = time.time()
time.sleep(float(os.environ.get("SLEEP", "0")))
with open(os.path.join(os.environ["SM_MODEL_DIR"], os.environ["SM_CURRENT_HOST"] + ".txt"), "w") as f:
    f.write(json.dumps({"start": start, "end": time.time()}))
"""
TRAIN_FAIL = "raise SystemExit('exploded on purpose in ' + __import__('os').environ['SM_CURRENT_HOST'])\n"

USER_TESTS = """\
import json, pathlib
import pytest

SRC = pathlib.Path(__file__).parent / "src"

def test_two_hosts(sagemaker_job):
    result = sagemaker_job(entry_point="train.py", source_dir=SRC, instance_count=2,
                           instance_type="ml.m5.xlarge")
    assert result.ok, result.failure_reason
    assert sorted(result.model_files()) == ["algo-1.txt", "algo-2.txt"]

def test_failing_job(sagemaker_job):
    result = sagemaker_job(entry_point="fail.py", source_dir=SRC)
    assert result.ok

@pytest.mark.real
def test_only_on_sagemaker(sagemaker_job):
    raise AssertionError("must not run without --real")

def test_each_target(sagemaker_target):
    assert sagemaker_target in ("emulator", "real")
"""

PARALLEL_TESTS = """\
import json, os, pathlib

SRC = pathlib.Path(__file__).parent / "src"
OUT = pathlib.Path(__file__).parent / "times"

def _run(sagemaker_job, tmp_path, tag):
    result = sagemaker_job(entry_point="train.py", source_dir=SRC, instance_count=2,
                           instance_type="ml.m5.xlarge", environment={"SLEEP": "4"})
    assert result.ok, result.failure_reason
    times = json.loads(result.model_files()["algo-1.txt"])
    OUT.mkdir(exist_ok=True)
    (OUT / tag).write_text(json.dumps({**times, "worker": os.environ.get("PYTEST_XDIST_WORKER"),
                                       "job": result.job_name, "job_dir": str(result.job_dir),
                                       "tmp_path": str(tmp_path)}))

def test_cluster_a(sagemaker_job, tmp_path):
    _run(sagemaker_job, tmp_path, "a")

def test_cluster_b(sagemaker_job, tmp_path):
    _run(sagemaker_job, tmp_path, "b")
"""


#: The machine's framework layers (GBs, minutes to install), read before pytester's own HOME.
CACHE_HOME = str(cache_dir().parent)


@pytest.fixture
def user_repo(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("XDG_CACHE_HOME", CACHE_HOME)  # pytester's HOME is new: keep the layers
    for var in ("SAGEMAKER_ROLE", "SAGEMAKER_BUCKET", "SAGEMAKER_REGION", "SAGEMAKER_IMAGE"):
        monkeypatch.delenv(var, raising=False)
    src = pytester.path / "tests" / "src"
    src.mkdir(parents=True)
    (src / "train.py").write_text(TRAIN_OK)
    (src / "fail.py").write_text(TRAIN_FAIL)
    # the user's conftest only uses the plugin (loaded through its pytest11 entry point)
    (pytester.path / "tests" / "conftest.py").write_text('"""Uses the sagemaker_emulator plugin."""\n')
    (pytester.path / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")
    return pytester


def test_user_repo_jobs_skip_and_log_sections(user_repo: pytest.Pytester) -> None:
    (user_repo.path / "tests" / "test_user.py").write_text(USER_TESTS)
    result = user_repo.runpytest_subprocess("-rs", "--emulator-keep-failed", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1, skipped=2)
    out = result.stdout.str()
    assert "needs --real" in out
    assert "algo-1 log tail" in out and "exploded on purpose in algo-1" in out
    kept = list(user_repo.path.parent.glob("**/sagemaker-jobs/failing-job-*/hosts/algo-1"))
    dropped = list(user_repo.path.parent.glob("**/sagemaker-jobs/two-hosts-*/hosts"))
    # positive control for `not dropped`: the passing job's folder is where the glob looks
    assert list(user_repo.path.parent.glob("**/sagemaker-jobs/two-hosts-*/job.json"))
    assert kept and not dropped


def test_real_without_settings_is_a_usage_error(user_repo: pytest.Pytester) -> None:
    (user_repo.path / "tests" / "test_user.py").write_text("def test_x():\n    pass\n")
    result = user_repo.runpytest_subprocess("--real", "--sagemaker-region", "us-west-2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    for name in ("--sagemaker-role", "--sagemaker-bucket", "--sagemaker-image"):
        assert name in err
    assert "--sagemaker-region" not in err.split("needs", 1)[-1]


def test_two_cluster_tests_run_at_once_under_xdist(user_repo: pytest.Pytester) -> None:
    import_or_skip("xdist")
    (user_repo.path / "tests" / "test_parallel.py").write_text(PARALLEL_TESTS)
    result = user_repo.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    a = json.loads((user_repo.path / "tests" / "times" / "a").read_text())
    b = json.loads((user_repo.path / "tests" / "times" / "b").read_text())
    # two xdist workers, each job under its own test's tmp_path, with its own job name ...
    assert {a["worker"], b["worker"]} == {"gw0", "gw1"}, (a, b)
    for r in (a, b):
        assert Path(r["tmp_path"]) in Path(r["job_dir"]).parents, r
    assert a["job"] != b["job"]
    # ... and the two clusters ran at the same time
    assert a["start"] < b["end"] and b["start"] < a["end"], (a, b)


TUNING_TESTS = """\
import pathlib
from sagemaker.pytorch import PyTorch
from sagemaker.tuner import ContinuousParameter, HyperparameterTuner

SRC = pathlib.Path(__file__).parent / "src"

def test_tuning_launcher(sagemaker_session):
    est = PyTorch(entry_point="tuned.py", source_dir=str(SRC), role="any", framework_version="2.3.0",
                  py_version="py311", instance_count=1, instance_type="ml.m5.xlarge",
                  sagemaker_session=sagemaker_session)
    tuner = HyperparameterTuner(est, "loss", {"lr": ContinuousParameter(0.1, 0.2)}, objective_type="Minimize",
                                metric_definitions=[{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
                                strategy="Random", max_jobs=1, max_parallel_jobs=1)
    tuner.fit()
    best = tuner.describe()["BestTrainingJob"]
    assert 0.1 <= best["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] <= 0.2
"""


def test_the_session_fixture_runs_a_tuning_launcher(user_repo: pytest.Pytester) -> None:
    """``sagemaker_session`` is an EmulatorSession a user's tuning launcher code takes as is."""
    import importlib.util

    # Not imported here: pytester restores sys.modules after the test, and numpy (which sagemaker
    # imports) cannot be imported twice in one process.
    if importlib.util.find_spec("sagemaker") is None and os.environ.get("CI") != "true":
        pytest.skip("needs the sagemaker SDK (extra 'sdk')")
    (user_repo.path / "tests" / "src" / "tuned.py").write_text(
        "import sys\nprint('loss=' + sys.argv[sys.argv.index('--lr') + 1])\n")
    (user_repo.path / "tests" / "test_tuning.py").write_text(TUNING_TESTS)
    result = user_repo.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


# --- the --real path, offline -----------------------------------------------------------------


def test_real_path_submits_the_request_the_emulator_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run ``run_real`` against moto (S3, logs) and a stubbed SageMaker client; compare the
    CreateTrainingJob it sends with the emulator's request for the same keyword arguments."""
    import_or_skip("sagemaker")
    moto = import_or_skip("moto")
    import boto3
    from botocore.stub import Stubber
    from sm_emulator_fixtures.real import RealSettings, run_real

    from emulator.job.request import create

    for var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(TRAIN_OK)
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.csv").write_text("1\n")
    kwargs: dict[str, Any] = dict(entry_point="train.py", source_dir=src, instance_count=2,
                                  instance_type="ml.p4d.24xlarge", hyperparameters={"epochs": 2, "name": "x"},
                                  distribution={"torch_distributed": {"enabled": True}},
                                  channels={"train": data}, environment={"A": "1"}, max_run=3600,
                                  job_name="real-path-offline-1", region="us-west-2")
    settings = RealSettings(role="arn:aws:iam::123456789012:role/R", bucket="test-bucket",
                            region="us-west-2", image="123.dkr.ecr.us-west-2.amazonaws.com/pt:2.3.0-gpu-py311")
    sent: dict[str, Any] = {}

    with moto.mock_aws():
        boto3.client("s3", region_name="us-west-2").create_bucket(
            Bucket="test-bucket", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})

        def session_factory(s: RealSettings) -> Any:
            import sagemaker

            boto = boto3.Session(region_name=s.region)
            client = boto.client("sagemaker")
            client.meta.events.register("provide-client-params.sagemaker.CreateTrainingJob",
                                        lambda params, **_: sent.update(params))
            stub = Stubber(client)
            stub.add_response("create_training_job", {"TrainingJobArn": "arn:x"})
            done = {"TrainingJobName": "real-path-offline-1", "TrainingJobArn": "arn:x",
                    "TrainingJobStatus": "Completed", "SecondaryStatus": "Completed",
                    "AlgorithmSpecification": {"TrainingInputMode": "File"},
                    "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
                    "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
                    "CreationTime": "2025-01-01T00:00:00Z",
                    "OutputDataConfig": {"S3OutputPath": "s3://test-bucket/sagemaker-emulator-tests"},
                    "ModelArtifacts": {"S3ModelArtifacts": "s3://test-bucket/none/model.tar.gz"}}
            for _ in range(3):
                stub.add_response("describe_training_job", done)
            stub.activate()
            return sagemaker.Session(boto_session=boto, sagemaker_client=client, default_bucket=s.bucket)

        result = run_real(dict(kwargs), settings=settings, workdir=tmp_path / "real",
                          session_factory=session_factory, poll=0)

    assert result.real and result.ok and [h.name for h in result.hosts] == ["algo-1", "algo-2"]
    emulated = create(**{**kwargs, "output_path": tmp_path / "emu"}).to_dict()
    # Documented differences: where the code is, S3 vs file locations, the image, the role.
    real_hps = dict(sent["HyperParameters"])
    emu_hps = dict(emulated["HyperParameters"])
    assert real_hps.pop("sagemaker_submit_directory").endswith('/sourcedir.tar.gz"')
    assert emu_hps.pop("sagemaker_submit_directory") == '"/opt/ml/code"'
    assert real_hps == emu_hps
    assert sent["ResourceConfig"] == emulated["ResourceConfig"]
    assert sent["StoppingCondition"] == emulated["StoppingCondition"]
    assert sent["Environment"] == emulated["Environment"]
    names = [c["ChannelName"] for c in emulated["InputDataConfig"]]
    assert [c["ChannelName"] for c in sent["InputDataConfig"]] == names
    assert sent["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"].startswith("s3://test-bucket/")
    assert sent["AlgorithmSpecification"]["TrainingImage"] == settings.image
    assert sent["RoleArn"] == settings.role
    assert os.environ.get("AWS_ACCESS_KEY_ID") != "FOOBARKEY"
