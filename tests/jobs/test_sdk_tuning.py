"""SDK v2 ``HyperparameterTuner`` on EmulatorSession: real training jobs, answered as SageMaker does.

Four 1-host jobs in all: one Random tuning job of two (read by most tests through a module
fixture), one of one whose objective regex matches nothing, and one stopped while it runs. Expected values come from the
script's own arithmetic, the SDK's code and the sagemaker-training toolkit's (cited per test).
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..conftest import import_or_skip

import_or_skip("sagemaker")
import_or_skip("moto")

#: The objective is a function of the tuned values, so the best job can be checked without the emulator.
TRAIN = """\
import argparse, json, os, sys
p = argparse.ArgumentParser()
p.add_argument("--lr", type=float); p.add_argument("--opt"); p.add_argument("--epochs", type=int)
args = p.parse_args()
print(f"val_loss={args.lr * (2 if args.opt == 'sgd' else 1)}", flush=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "argv.json"), "w") as f:
    json.dump(sys.argv[1:], f)
"""
METRICS = [{"Name": "val:loss", "Regex": "val_loss=([0-9.e-]+)"}]


def loss(tuned: dict[str, str]) -> float:
    """TRAIN's objective from the values as passed (categorical JSON-encoded by the SDK)."""
    return float(tuned["lr"]) * (2 if json.loads(tuned["opt"]) == "sgd" else 1)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from emulator.sdk.session import EmulatorSession

    root = tmp_path_factory.mktemp("tuning")
    (root / "src").mkdir()
    (root / "src" / "train.py").write_text(TRAIN)
    (root / "src" / "slow.py").write_text("import time\nprint('started', flush=True)\ntime.sleep(600)\n")
    sess = EmulatorSession(region="us-west-2", s3_root=root / "s3", profile="ci")
    sess.project = root  # type: ignore[attr-defined]
    yield sess
    sess.close()


def _tuner(session: Any, metric_definitions: list[dict[str, str]], max_jobs: int, *,
           max_parallel_jobs: int | None = None, entry_point: str = "train.py") -> Any:
    from sagemaker.pytorch import PyTorch
    from sagemaker.tuner import CategoricalParameter, ContinuousParameter, HyperparameterTuner

    est = PyTorch(entry_point=entry_point, source_dir=str(Path(session.project) / "src"), role="SageMakerRole",
                  framework_version="2.3.0", py_version="py311", instance_count=1, instance_type="ml.m5.xlarge",
                  hyperparameters={"epochs": 2}, sagemaker_session=session)
    return HyperparameterTuner(est, "val:loss", {"lr": ContinuousParameter(0.001, 0.1),
                                                 "opt": CategoricalParameter(["sgd", "adam"])},
                               metric_definitions=metric_definitions, strategy="Random", objective_type="Minimize",
                               max_jobs=max_jobs, max_parallel_jobs=max_parallel_jobs or max_jobs, random_seed=7)


@pytest.fixture(scope="module")
def tuned(session: Any) -> Any:
    tuner = _tuner(session, METRICS, max_jobs=2)
    tuner.fit(job_name="tuning-two")
    return tuner


def test_the_tuning_job_completes_with_both_objectives(tuned: Any) -> None:
    desc = tuned.describe()
    assert desc["HyperParameterTuningJobStatus"] == "Completed"
    assert desc["TrainingJobStatusCounters"] == {"Completed": 2, "InProgress": 0, "RetryableError": 0,
                                                 "NonRetryableError": 0, "Stopped": 0}
    assert desc["ObjectiveStatusCounters"] == {"Succeeded": 2, "Pending": 0, "Failed": 0}
    assert desc["HyperParameterTuningJobConfig"]["ResourceLimits"]["MaxNumberOfTrainingJobs"] == 2  # as sent
    assert desc["Emulator"]["EarlyStopping"] == "not emulated"


def test_best_training_job_is_the_lowest_loss(tuned: Any) -> None:
    """``Minimize``: the best job is the one whose TRAIN arithmetic gives the lowest loss."""
    summaries = tuned.sagemaker_session.sagemaker_client.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName=tuned.latest_tuning_job.name)["TrainingJobSummaries"]
    assert len(summaries) == 2
    names = [s["TrainingJobName"] for s in summaries]
    assert names == sorted(names)  # the default order: Name, Ascending
    for s in summaries:
        assert set(s["TunedHyperParameters"]) == {"lr", "opt"}
        objective = s["FinalHyperParameterTuningJobObjectiveMetric"]
        assert objective == {"Type": "Minimize", "MetricName": "val:loss",
                             "Value": pytest.approx(loss(s["TunedHyperParameters"]))}
        assert s["ObjectiveStatus"] == "Succeeded"
    lowest = min(summaries, key=lambda s: loss(s["TunedHyperParameters"]))
    assert tuned.best_training_job() == lowest["TrainingJobName"]


def test_analytics_reads_the_runs(tuned: Any) -> None:
    """``HyperparameterTuningJobAnalytics`` (the SDK's) turns the summaries into a frame."""
    frame = tuned.analytics().dataframe()
    assert len(frame) == 2
    for _, row in frame.iterrows():
        assert row["FinalObjectiveValue"] == pytest.approx(row["lr"] * (2 if json.loads(row["opt"]) == "sgd" else 1))
    assert set(tuned.analytics().tuning_ranges) == {"lr", "opt"}


def test_each_training_job_got_what_the_service_passes(tuned: Any) -> None:
    """DescribeTrainingJob has ``TuningJobArn`` and ``_tuning_objective_metric``; the script's argv
    is what the sagemaker-training toolkit makes of the hyperparameters: JSON-decoded, and without
    ``_tuning_objective_metric`` (``params.SAGEMAKER_HYPERPARAMETERS``)."""
    session = tuned.sagemaker_session
    best = tuned.best_training_job()
    desc = session.describe_training_job(best)
    tuning_arn = tuned.describe()["HyperParameterTuningJobArn"]
    assert desc["TuningJobArn"] == tuning_arn
    assert desc["HyperParameters"]["_tuning_objective_metric"] == '"val:loss"'
    hps = desc["HyperParameters"]
    estimator = tuned.best_estimator()  # the SDK's attach to the best job
    with tarfile.open(session.s3_store.local_path(estimator.model_data)) as tar:
        argv = json.load(tar.extractfile("argv.json"))  # type: ignore[arg-type]
    assert argv == ["--epochs", "2", "--lr", hps["lr"], "--opt", json.loads(hps["opt"])]


def test_an_objective_no_job_reported_fails_the_tuning_job(session: Any) -> None:
    """No training job gave the objective: the SDK's ``UnexpectedStatusException`` with SageMaker's
    reason (aws/amazon-sagemaker-examples#2437), the regex and the line nearest to it."""
    from sagemaker.exceptions import UnexpectedStatusException

    tuner = _tuner(session, [{"Name": "val:loss", "Regex": "validation_loss=([0-9.]+)"}], max_jobs=1)
    with pytest.raises(UnexpectedStatusException) as info:
        # SDK v2 names tuning jobs to the minute (name_from_base(short=True)): a second tuner in
        # the same minute needs its own name, on SageMaker too (ResourceInUse otherwise).
        tuner.fit(job_name="tuning-no-objective")
    text = str(info.value)
    assert "Failed. Reason: No training job succeeded after 1 attempts. Please take a look at the training job " \
           "failures to get more details." in text
    assert "validation_loss=([0-9.]+)" in text and "val_loss=" in text
    desc = tuner.describe()
    assert desc["ObjectiveStatusCounters"] == {"Succeeded": 0, "Pending": 0, "Failed": 1}
    assert "BestTrainingJob" not in desc


@pytest.fixture
def quick_stop(session: Any) -> Iterator[Any]:
    """A session whose stopped hosts get 1 s between SIGTERM and SIGKILL (SageMaker: 120 s)."""
    from emulator.sdk.session import EmulatorSession

    sess = EmulatorSession(region="us-west-2", s3_root=Path(session.project) / "s3-stop", profile="ci",
                           stop_grace=1.0)
    sess.project = session.project  # type: ignore[attr-defined]
    yield sess
    sess.close()


def test_stop_tuning_job_stops_its_running_training_job(quick_stop: Any) -> None:
    """StopHyperParameterTuningJob: the running training job is stopped, no other starts; the SDK's
    ``wait`` only warns on ``Stopped`` (``_check_job_status``)."""
    import time

    tuner = _tuner(quick_stop, METRICS, max_jobs=2, max_parallel_jobs=1, entry_point="slow.py")
    tuner.fit(job_name="tuning-stopped", wait=False)
    job = quick_stop.emulator_client.tuning.jobs["tuning-stopped"]
    while not job.trials:  # the first training job has been created (no time limit: it is the next step)
        time.sleep(0.05)
    tuner.stop_tuning_job()
    tuner.wait()
    desc = tuner.describe()
    assert desc["HyperParameterTuningJobStatus"] == "Stopped"
    assert desc["TrainingJobStatusCounters"] == {"Completed": 0, "InProgress": 0, "RetryableError": 0,
                                                 "NonRetryableError": 0, "Stopped": 1}
    assert "FailureReason" not in desc
