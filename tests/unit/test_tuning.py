"""HyperparameterTuner (SDK v2) through EmulatorSession: what is refused before any host starts,
and the training job requests the tuning job builds. No host starts here (tests/unit).

Expected values come from: botocore's own validator and service model, the installed SDK's code
(``sagemaker.tuner``, ``sagemaker.parameter``), SageMaker's ValidationException texts quoted in
public issues, AWS's *How Hyperparameter Tuning Works* page, and observed DescribeTrainingJob
answers of real tuning jobs (cited per test).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..conftest import import_or_skip

import_or_skip("sagemaker")
import_or_skip("moto")

METRICS = [{"Name": "val:loss", "Regex": "val_loss=([0-9.]+)"}]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from emulator.sdk.session import EmulatorSession

    root = tmp_path_factory.mktemp("tuning-unit")
    (root / "src").mkdir()
    (root / "src" / "train.py").write_text("print('val_loss=0.5')\n")
    sess = EmulatorSession(region="us-west-2", s3_root=root / "s3", profile="ci")
    sess.project = root  # type: ignore[attr-defined]
    yield sess
    sess.close()


def _tuner(session: Any, ranges: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    from sagemaker.pytorch import PyTorch
    from sagemaker.tuner import CategoricalParameter, ContinuousParameter, HyperparameterTuner

    est = PyTorch(entry_point="train.py", source_dir=str(Path(session.project) / "src"), role="SageMakerRole",
                  framework_version="2.3.0", py_version="py311", instance_count=1, instance_type="ml.m5.xlarge",
                  hyperparameters={"epochs": 2}, sagemaker_session=session)
    if ranges is None:
        ranges = {"lr": ContinuousParameter(0.001, 0.1), "opt": CategoricalParameter(["sgd", "adam"])}
    options: dict[str, Any] = {"metric_definitions": METRICS, "strategy": "Random", "objective_type": "Minimize",
                               "max_jobs": 2, "max_parallel_jobs": 1, **kwargs}
    return HyperparameterTuner(est, kwargs.pop("objective", "val:loss"), ranges,
                               **{k: v for k, v in options.items() if k != "objective"})


def _refused(session: Any, tuner: Any) -> str:
    """Run ``fit`` and return the refusal's text; nothing may have started."""
    from botocore.exceptions import ClientError, ParamValidationError

    before = set(session.emulator_client.jobs)
    with pytest.raises((ClientError, ParamValidationError)) as info:
        tuner.fit(wait=False)
    assert set(session.emulator_client.jobs) == before  # no training job was created
    tuning = session.emulator_client._tuning
    assert tuning is None or tuner._current_job_name not in tuning.jobs
    return str(info.value)


def _sdk_request(tuner: Any, session: Any) -> dict[str, Any]:
    """The CreateHyperParameterTuningJob request SDK v2 builds in ``fit`` (its own code path)."""
    from sagemaker.tuner import _TuningJob

    tuner._prepare_estimator_for_tuning(tuner.estimator, None, None)
    tuner._prepare_for_tuning()
    request: dict[str, Any] = session._get_tuning_request(**_TuningJob._get_tuner_args(tuner, None))
    return request


def test_an_objective_not_among_the_definitions_is_sagemakers_validation_exception(session: Any) -> None:
    """SageMaker's text, as quoted in aws/sagemaker-python-sdk#3932 and
    aws/amazon-sagemaker-examples#1207."""
    text = _refused(session, _tuner(session, objective="val:acc"))
    assert "ValidationException" in text and "CreateHyperParameterTuningJob" in text
    assert ("A metric is required for this hyperparameter tuning job objective. Provide a metric in the "
            "metric definitions.") in text
    assert "HyperParameterTuningJobConfig.HyperParameterTuningJobObjective.MetricName" in text


def test_an_invalid_regex_is_refused_naming_it(session: Any) -> None:
    text = _refused(session, _tuner(session, metric_definitions=[{"Name": "val:loss", "Regex": "val_loss=([0-9."}]))
    assert "TrainingJobDefinition.AlgorithmSpecification.MetricDefinitions[0].Regex" in text
    assert "val_loss=([0-9." in text


def test_max_jobs_below_max_parallel_jobs_is_refused(session: Any) -> None:
    text = _refused(session, _tuner(session, max_jobs=1, max_parallel_jobs=2))
    assert "HyperParameterTuningJobConfig.ResourceLimits.MaxNumberOfTrainingJobs" in text
    assert "MaxParallelTrainingJobs 2" in text


def test_max_parallel_jobs_zero_is_botocores_own_refusal(session: Any) -> None:
    """boto3 validates a request against the service model before sending it: ``min`` 1."""
    text = _refused(session, _tuner(session, max_parallel_jobs=0))
    assert ("Invalid value for parameter HyperParameterTuningJobConfig.ResourceLimits.MaxParallelTrainingJobs, "
            "value: 0, valid min value: 1") in text


def test_a_grid_tuner_without_max_jobs_is_refused_by_botocore(session: Any) -> None:
    """SDK v2 keeps ``max_jobs=None`` for Grid (tuner.py: "we expect max_jobs equals None and
    recalculate it later") and sends ``MaxNumberOfTrainingJobs: None``; botocore's validator
    refuses a None integer before anything is sent (``botocore.validate``)."""
    from sagemaker.tuner import CategoricalParameter

    tuner = _tuner(session, {"opt": CategoricalParameter(["sgd", "adam"])}, strategy="Grid", max_jobs=None)
    text = _refused(session, tuner)
    assert "Invalid type for parameter HyperParameterTuningJobConfig.ResourceLimits.MaxNumberOfTrainingJobs, " \
           "value: None" in text


def test_a_grid_over_a_continuous_range_is_refused(session: Any) -> None:
    """*How Hyperparameter Tuning Works*: "Only categorical parameters are supported when using the
    grid search strategy"."""
    text = _refused(session, _tuner(session, strategy="Grid"))
    assert "HyperParameterTuningJobConfig.ParameterRanges" in text and "Continuous" in text


def test_a_grid_max_jobs_other_than_the_combinations_is_refused(session: Any) -> None:
    """Same page: "If specified, the value of MaxNumberOfTrainingJobs should equal the total number
    of distinct categorical combinations possible" (2 x 3 = 6)."""
    from sagemaker.tuner import CategoricalParameter

    ranges = {"opt": CategoricalParameter(["sgd", "adam"]), "bs": CategoricalParameter([16, 32, 64])}
    text = _refused(session, _tuner(session, ranges, strategy="Grid", max_jobs=4))
    assert "MaxNumberOfTrainingJobs" in text and "6" in text


def test_a_range_of_the_wrong_type_is_refused(session: Any) -> None:
    """IntegerParameter sends its bounds through ``to_string`` (sagemaker.parameter): 0.5 arrives as
    "0.5", not an integer."""
    from sagemaker.tuner import IntegerParameter

    text = _refused(session, _tuner(session, {"epochs_x": IntegerParameter(0.5, 3)}))
    assert "HyperParameterTuningJobConfig.ParameterRanges.IntegerParameterRanges[0].MinValue" in text
    assert "'0.5'" in text


def test_too_few_discrete_combinations_is_sagemakers_text(session: Any) -> None:
    """The ValidationException quoted in aws/amazon-sagemaker-operator-for-k8s#123 (3 combinations,
    10 jobs)."""
    from sagemaker.tuner import IntegerParameter

    text = _refused(session, _tuner(session, {"layers": IntegerParameter(1, 3)}, max_jobs=10))
    assert ("You don't have enough combinations of hyperparameter ranges. The total number of hyperparameter "
            "combinations for the provided ranges [3.0] must be equal or greater than the value of "
            "MaxNumberOfJobs, [10]. Provide additional ranges.") in text


def test_the_training_job_request_is_built_as_the_service_builds_it(session: Any) -> None:
    """Observed DescribeTrainingJob of a real PyTorch tuning job (a public dog-breed HPO project's
    README): static hyperparameters JSON-encoded as the SDK sent them (``'"30"'``), the tuned
    continuous one plain (``'lr': '0.006576404654024625'``), the categorical one as the SDK's
    ``as_json_range`` listed it (``'"512"'``), and ``_tuning_objective_metric: '"average test
    loss"'``. The name: the tuning job's, ``-NNN-`` and 8 hex digits (observed
    ``xgboost-190407-1532-005-0e830ada``)."""
    from emulator.sdk import tuning as T

    request = _sdk_request(_tuner(session), session)
    definition = request["TrainingJobDefinition"]
    assert definition["StaticHyperParameters"]["sagemaker_program"] == '"train.py"'  # the SDK's encoding
    assert request["HyperParameterTuningJobConfig"]["ParameterRanges"]["CategoricalParameterRanges"] == [
        {"Name": "opt", "Values": ['"sgd"', '"adam"']}]  # as_json_range for a Framework estimator
    spec = T.validate(request)
    name = T.training_job_name(spec.name, 1, random.Random(0))
    assert re.fullmatch(re.escape(spec.name) + r"-001-[0-9a-f]{8}", name)
    tuned = T.candidates(spec, random.Random(1))[0]
    created = T.training_job_request(spec, name, tuned)
    hps = created["HyperParameters"]
    assert hps["_tuning_objective_metric"] == json.dumps("val:loss")
    assert hps["opt"] in ('"sgd"', '"adam"')
    assert 0.001 <= float(hps["lr"]) <= 0.1 and hps["lr"] == repr(float(hps["lr"]))  # plain float text
    assert {k: v for k, v in hps.items() if k not in ("opt", "lr", "_tuning_objective_metric")} \
        == definition["StaticHyperParameters"]
    assert created["AlgorithmSpecification"]["MetricDefinitions"] == METRICS
    assert created["ResourceConfig"] == {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30}
    assert created["RoleArn"] == definition["RoleArn"]


def test_a_plain_estimator_gets_the_objective_unquoted() -> None:
    """Observed for XGBoost (not an SDK framework estimator): ``'_tuning_objective_metric':
    'validation:auc'`` (DescribeTrainingJob quoted in a public book's chapter 14)."""
    from emulator.sdk import tuning as T

    spec = T.TuningSpec(name="x", strategy="Random", objective_name="validation:auc", objective_type="Maximize",
                        max_jobs=1, max_parallel=1, ranges=(), definitions=(),
                        definition={"StaticHyperParameters": {"objective": "binary:logistic"},
                                    "AlgorithmSpecification": {"TrainingImage": "img"}})
    assert T.objective_hyperparameter(spec) == "validation:auc"


def test_grid_runs_every_combination_once(session: Any) -> None:
    """*How Hyperparameter Tuning Works*: "The number of training jobs created by the tuning job is
    automatically calculated to be the total number of distinct categorical combinations"."""
    from sagemaker.tuner import CategoricalParameter

    from emulator.sdk import tuning as T

    ranges = {"opt": CategoricalParameter(["sgd", "adam"]), "bs": CategoricalParameter([16, 32, 64])}
    spec = T.validate(_sdk_request(_tuner(session, ranges, strategy="Grid", max_jobs=6), session))
    picks = T.candidates(spec, random.Random(0))
    assert spec.max_jobs == 6 and len(picks) == 6
    assert len({tuple(sorted(p.items())) for p in picks}) == 6


def test_bayesian_runs_as_random_search_with_the_same_budget(session: Any) -> None:
    from emulator.sdk import tuning as T

    spec = T.validate(_sdk_request(_tuner(session, strategy="Bayesian", max_jobs=3), session))
    assert spec.strategy in T.RUN_AS_RANDOM
    assert len(T.candidates(spec, random.Random(0))) == 3


@pytest.mark.parametrize(("max_parallel", "cores", "instances", "expected"),
                         [(2, 2, 1, 2), (3, 2, 1, 2), (2, 2, 2, 1), (4, 16, 2, 4), (1, 1, 4, 1)])
def test_max_parallel_jobs_is_honoured_within_the_cores(max_parallel: int, cores: int, instances: int,
                                                        expected: int) -> None:
    """At most ``MaxParallelTrainingJobs`` at once, and at most one host per core (never none)."""
    from emulator.sdk.tuning_jobs import parallel_slots

    assert parallel_slots(max_parallel, cores=cores, instances=instances) == expected


def test_more_than_100_hyperparameters_with_the_one_amt_adds_is_refused(session: Any) -> None:
    """*Define Hyperparameter Ranges*: "You can use up to 100 hyperparameters in total (static +
    tunable)", and the hyperparameter AMT adds counts toward the limit: the SDK's static ones plus
    the 2 tuned plus ``_tuning_objective_metric`` make 101 here."""
    from emulator.errors import RequestError
    from emulator.sdk import tuning as T

    request = _sdk_request(_tuner(session), session)
    static = request["TrainingJobDefinition"]["StaticHyperParameters"]
    for i in range(98 - len(static)):
        static[f"extra_{i}"] = "1"
    assert len(static) == 98
    with pytest.raises(RequestError) as info:
        T.validate(request)
    assert info.value.field == "TrainingJobDefinition.StaticHyperParameters"
    del static["extra_0"]
    assert T.validate(request).name == request["HyperParameterTuningJobName"]  # 100 in all is fine
