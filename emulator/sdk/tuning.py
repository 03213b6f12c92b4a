"""CreateHyperParameterTuningJob, checked as SageMaker checks it, and the training jobs it implies.

Pure: a request in, a :class:`TuningSpec` (or a refusal) out; :func:`training_job_request` builds
each training job's CreateTrainingJob request from the training job definition. Nothing here
starts a host (:mod:`emulator.sdk.tuning_jobs` runs them).

Refused before any training job starts, with the text of whoever refuses it on AWS:

* botocore's own client-side validation (``ParamValidationError``: types, required members,
  ``min`` bounds), run on the whole request with the service model, as boto3 does before sending
  — e.g. ``MaxParallelTrainingJobs`` 0, or the ``None`` that SDK v2 sends as
  ``MaxNumberOfTrainingJobs`` for a ``Grid`` tuner created without ``max_jobs``;
* SageMaker's ``ValidationException`` where its text is known: an objective metric that is not
  among the metric definitions ("A metric is required for this hyperparameter tuning job
  objective. Provide a metric in the metric definitions.", aws/sagemaker-python-sdk#3932,
  aws/amazon-sagemaker-examples#1207); too few discrete combinations for ``MaxNumberOfTrainingJobs``
  ("You don't have enough combinations of hyperparameter ranges. …",
  aws/amazon-sagemaker-operator-for-k8s#123);
* the documented rules, in the emulator's words naming the field (SageMaker's text not known):
  ``MaxNumberOfTrainingJobs`` below ``MaxParallelTrainingJobs``; the service model's ``max``
  bounds and name patterns (botocore checks only ``min``); at most 30 ranges in all
  (*ParameterRanges*); more than 100 hyperparameters, static, tuned and the one AMT adds
  (*Define Hyperparameter Ranges*); an integer or continuous bound that is not a number of its type, or
  ``MinValue`` above ``MaxValue``; ``Logarithmic`` scaling of a range that is not above 0 and
  ``ReverseLogarithmic`` outside [0, 1) (*ContinuousParameterRange*); ``Grid`` with a non-
  categorical range, or a ``MaxNumberOfTrainingJobs`` that is not the number of combinations
  (*How Hyperparameter Tuning Works*); ``Hyperband`` with early stopping ``Auto``
  (*HyperParameterTuningJobConfig.TrainingJobEarlyStoppingType*); a metric regex Python cannot
  compile (:mod:`emulator.job.metrics`).

Not emulated, refused naming the field: several training job definitions
(``TrainingJobDefinitions``), ``WarmStartConfig``, ``Autotune``/``AutoParameters``,
``AlgorithmName`` (Marketplace algorithms), ``HyperParameterTuningResourceConfig.InstanceConfigs``.

How the service builds each training job (emulated): its name is the tuning job's name,
``-NNN-`` (1-based, 3 digits) and 8 hex digits (observed: ``xgboost-190407-1532-005-0e830ada``;
the API reference: "This name is the prefix for the names of all training jobs"); its
hyperparameters are the static ones as sent, each tuned one as a plain string — an integer as
``str(int)``, a continuous value as Python's shortest float text (observed
``'lr': '0.006576404654024625'``), a categorical value exactly as listed in ``Values`` (SDK v2 JSON-
encodes them for framework estimators: ``'"512"'``) — and ``_tuning_objective_metric``, the
objective's name: JSON-quoted when the static hyperparameters carry SDK v2's
``sagemaker_estimator_class_name`` (observed ``'"average test loss"'`` for a PyTorch estimator),
as is otherwise (observed ``'validation:auc'`` for XGBoost). That quoting rule is inferred from the
two observations, not documented. The sagemaker-training toolkit keeps
``_tuning_objective_metric`` out of the script's arguments (``params.SAGEMAKER_HYPERPARAMETERS``)
and decodes each value as JSON where it can, so a JSON-quoted categorical ``'"512"'`` reaches the
script as ``--batch_size 512`` and a tuned ``'0.0065'`` as ``--lr 0.0065``; the emulator runs the
toolkit, so the script sees what it sees on SageMaker.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import RequestError
from ..job.metrics import MetricDefinition, parse_definitions

OPERATION = "CreateHyperParameterTuningJob"
#: botocore's service model: HyperParameterTuningJobName.
NAME_PATTERN = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,31}")
NAME_MAX = 32
#: ParameterRanges: at most 30 ranges, over all three kinds ("the sum … can't exceed").
MAX_RANGES = 30
#: "You can use up to 100 hyperparameters in total (static + tunable)", and the one AMT adds counts
#: (*Define Hyperparameter Ranges*).
MAX_HYPERPARAMETERS = 100
#: HyperParameterTuningMaxRuntimeInSeconds.max in the service model.
MAX_RUNTIME = 15_768_000
STRATEGIES = ("Bayesian", "Random", "Hyperband", "Grid")
#: Strategies the emulator runs as Random search with the same budget (a stated deviation).
RUN_AS_RANDOM = ("Bayesian", "Hyperband")
OBJECTIVE_HP = "_tuning_objective_metric"
FRAMEWORK_MARKER = "sagemaker_estimator_class_name"
DEFINITION = "TrainingJobDefinition"
CONFIG = "HyperParameterTuningJobConfig"
METRIC_REQUIRED = ("A metric is required for this hyperparameter tuning job objective. "
                   "Provide a metric in the metric definitions.")


@dataclass(frozen=True)
class Range:
    """One tuned hyperparameter: ``kind`` is Integer, Continuous or Categorical."""

    name: str
    kind: str
    low: float = 0.0
    high: float = 0.0
    scaling: str = "Auto"
    values: tuple[str, ...] = ()

    def size(self) -> float:
        """How many distinct values it has (``inf`` for a continuous range)."""
        if self.kind == "Categorical":
            return float(len(self.values))
        if self.kind == "Integer":
            return float(int(self.high) - int(self.low) + 1)
        return math.inf

    def sample(self, rng: random.Random) -> str:
        """A value as the service passes it to the training job (a string, see the module doc)."""
        if self.kind == "Categorical":
            return rng.choice(self.values)
        x = _scaled(rng, self.low, self.high, self.scaling)
        if self.kind == "Integer":
            return str(min(int(self.high), max(int(self.low), round(x))))
        return repr(min(self.high, max(self.low, x)))


def _scaled(rng: random.Random, low: float, high: float, scaling: str) -> float:
    if scaling == "Logarithmic" and low > 0:
        return math.exp(rng.uniform(math.log(low), math.log(high)))
    if scaling == "ReverseLogarithmic" and high < 1:
        return 1 - math.exp(rng.uniform(math.log(1 - high), math.log(1 - low)))
    return rng.uniform(low, high)  # Linear, and Auto (SageMaker chooses; the emulator: linear)


@dataclass(frozen=True)
class TuningSpec:
    """A validated tuning request: what to run and how to judge it."""

    name: str
    strategy: str
    objective_name: str
    objective_type: str
    max_jobs: int
    max_parallel: int
    ranges: tuple[Range, ...]
    definitions: tuple[MetricDefinition, ...]
    definition: Mapping[str, Any]
    early_stopping: str = "Off"
    random_seed: int | None = None
    create_request: Mapping[str, Any] = field(default_factory=dict)

    @property
    def objective_regex(self) -> str:
        return next(d.regex for d in self.definitions if d.name == self.objective_name)


def _param_validate(create: Mapping[str, Any]) -> None:
    """botocore's client-side validation, as boto3 runs it before sending the request."""
    import botocore.session
    from botocore.exceptions import ParamValidationError
    from botocore.validate import ParamValidator

    model = botocore.session.get_session().get_service_model("sagemaker")
    report = ParamValidator().validate(dict(create), model.operation_model(OPERATION).input_shape)
    if report.has_errors():
        raise ParamValidationError(report=report.generate_report())


def _number(text: str, kind: str, where: str) -> float:
    try:
        return float(int(text)) if kind == "Integer" else float(text)
    except ValueError:
        raise RequestError(where, f"{text!r} is not {'an integer' if kind == 'Integer' else 'a number'}",
                           allowed=f"the text of {'an integer' if kind == 'Integer' else 'a number'}, "
                           "as the SDK's IntegerParameter/ContinuousParameter send it") from None


def _ranges(spec: Mapping[str, Any], where: str) -> tuple[Range, ...]:
    out: list[Range] = []
    if spec.get("AutoParameters"):
        raise RequestError(f"{where}.AutoParameters", "Autotune's AutoParameters are not emulated")
    for kind in ("Integer", "Continuous", "Categorical"):
        for i, r in enumerate(spec.get(f"{kind}ParameterRanges") or []):
            at = f"{where}.{kind}ParameterRanges[{i}]"
            name = r["Name"]
            if any(o.name == name for o in out):
                raise RequestError(f"{at}.Name", f"{name!r} has two ranges", allowed="one range per hyperparameter")
            if kind == "Categorical":
                out.append(Range(name, kind, values=tuple(r["Values"])))
                continue
            low = _number(r["MinValue"], kind, f"{at}.MinValue")
            high = _number(r["MaxValue"], kind, f"{at}.MaxValue")
            if low > high:
                raise RequestError(at, f"MinValue {r['MinValue']} is above MaxValue {r['MaxValue']}")
            scaling = r.get("ScalingType", "Auto")
            if scaling == "Logarithmic" and low <= 0:
                raise RequestError(f"{at}.ScalingType", f"Logarithmic scaling of [{r['MinValue']}, "
                                   f"{r['MaxValue']}]", allowed="ranges whose values are all greater than 0")
            if scaling == "ReverseLogarithmic" and (kind == "Integer" or low < 0 or high >= 1):
                raise RequestError(f"{at}.ScalingType", f"ReverseLogarithmic scaling of a {kind.lower()} "
                                   f"range [{r['MinValue']}, {r['MaxValue']}]",
                                   allowed="continuous ranges entirely within 0 <= x < 1")
            out.append(Range(name, kind, low, high, scaling))
    if len(out) > MAX_RANGES:
        raise RequestError(where, f"{len(out)} ranges", allowed=f"at most {MAX_RANGES} in all")
    return tuple(out)


def validate(create: Mapping[str, Any]) -> TuningSpec:
    """The request as a :class:`TuningSpec`, or a refusal (see the module docstring):
    ``ParamValidationError`` (botocore's), :class:`~emulator.errors.RequestError` (field named;
    ``ValidationException`` on the wire)."""
    _param_validate(create)
    name = create["HyperParameterTuningJobName"]
    if len(name) > NAME_MAX or not NAME_PATTERN.fullmatch(name):
        raise RequestError("HyperParameterTuningJobName", f"{name!r}",
                           allowed=f"1-{NAME_MAX} characters matching {NAME_PATTERN.pattern}")
    for key in ("TrainingJobDefinitions", "WarmStartConfig", "Autotune"):
        if create.get(key):
            raise RequestError(key, "is not emulated (one TrainingJobDefinition, no warm start, no Autotune)")
    if not create.get(DEFINITION):
        raise RequestError(DEFINITION, "missing", allowed="one training job definition")
    config = create[CONFIG]
    definition = create[DEFINITION]
    algo = definition["AlgorithmSpecification"]
    if algo.get("AlgorithmName") or not algo.get("TrainingImage"):
        raise RequestError(f"{DEFINITION}.AlgorithmSpecification.AlgorithmName",
                           "algorithm resources (Marketplace) are not emulated", allowed="a TrainingImage")
    resources = definition.get("HyperParameterTuningResourceConfig") or {}
    if resources.get("InstanceConfigs"):
        raise RequestError(f"{DEFINITION}.HyperParameterTuningResourceConfig.InstanceConfigs", "not emulated")
    strategy = config["Strategy"]
    limits = config["ResourceLimits"]
    max_parallel = limits["MaxParallelTrainingJobs"]
    runtime = limits.get("MaxRuntimeInSeconds")
    if runtime is not None and runtime > MAX_RUNTIME:
        raise RequestError(f"{CONFIG}.ResourceLimits.MaxRuntimeInSeconds", str(runtime),
                           allowed=f"120 to {MAX_RUNTIME}")
    early = config.get("TrainingJobEarlyStoppingType", "Off")
    if strategy == "Hyperband" and early != "Off":
        raise RequestError(f"{CONFIG}.TrainingJobEarlyStoppingType", f"{early!r} with the Hyperband strategy",
                           allowed="'Off': Hyperband has its own early stopping")
    if config.get("StrategyConfig") and strategy != "Hyperband":
        raise RequestError(f"{CONFIG}.StrategyConfig", f"given with the {strategy} strategy",
                           allowed="only with Hyperband")
    objective = config.get("HyperParameterTuningJobObjective") or definition.get("TuningObjective")
    if not objective:
        raise RequestError(f"{CONFIG}.HyperParameterTuningJobObjective", "missing",
                           allowed="{Type: Maximize|Minimize, MetricName}")
    definitions = parse_definitions(algo.get("MetricDefinitions"),
                                    f"{DEFINITION}.AlgorithmSpecification.MetricDefinitions")
    if objective["MetricName"] not in {d.name for d in definitions}:
        raise RequestError(f"{CONFIG}.HyperParameterTuningJobObjective.MetricName",
                           f"{objective['MetricName']!r}: {METRIC_REQUIRED}",
                           allowed=f"one of {[d.name for d in definitions]}")
    ranges = _ranges(config.get("ParameterRanges") or definition.get("HyperParameterRanges") or {},
                     f"{CONFIG}.ParameterRanges")
    if not ranges:
        raise RequestError(f"{CONFIG}.ParameterRanges", "no hyperparameter range", allowed="at least one range")
    static = definition.get("StaticHyperParameters") or {}
    for r in ranges:
        if r.name in static:
            raise RequestError(f"{DEFINITION}.StaticHyperParameters.{r.name}", "is also a tuned range",
                               allowed="each hyperparameter either static or tuned")
    total = len(static) + len(ranges) + 1  # + _tuning_objective_metric
    if total > MAX_HYPERPARAMETERS:
        raise RequestError(f"{DEFINITION}.StaticHyperParameters", f"{len(static)} static + {len(ranges)} tuned "
                           f"+ {OBJECTIVE_HP} = {total} hyperparameters",
                           allowed=f"at most {MAX_HYPERPARAMETERS} in total (static + tunable)")
    combinations = math.prod(r.size() for r in ranges)
    max_jobs = limits.get("MaxNumberOfTrainingJobs")
    where_max = f"{CONFIG}.ResourceLimits.MaxNumberOfTrainingJobs"
    if strategy == "Grid":
        kinds = sorted({r.kind for r in ranges if r.kind != "Categorical"})
        if kinds:
            raise RequestError(f"{CONFIG}.ParameterRanges", f"{', '.join(kinds)} ranges with the Grid strategy",
                               allowed="only categorical parameters are supported with grid search")
        if max_jobs is not None and max_jobs != combinations:
            raise RequestError(where_max, f"{max_jobs} with the Grid strategy",
                               allowed=f"the number of distinct categorical combinations, {int(combinations)}")
        max_jobs = int(combinations)
    elif max_jobs is None:
        raise RequestError(where_max, "missing", allowed=f"an integer >= 1 with the {strategy} strategy")
    elif combinations < max_jobs:
        raise RequestError(where_max, "You don't have enough combinations of hyperparameter ranges. The total "
                           f"number of hyperparameter combinations for the provided ranges [{combinations}] "
                           f"must be equal or greater than the value of MaxNumberOfJobs, [{max_jobs}]. "
                           "Provide additional ranges.")
    if max_jobs < max_parallel:
        raise RequestError(where_max, f"{max_jobs} is below MaxParallelTrainingJobs {max_parallel}",
                           allowed="MaxNumberOfTrainingJobs >= MaxParallelTrainingJobs")
    return TuningSpec(name=name, strategy=strategy, objective_name=objective["MetricName"],
                      objective_type=objective["Type"], max_jobs=int(max_jobs), max_parallel=max_parallel,
                      ranges=ranges, definitions=definitions, definition=definition, early_stopping=early,
                      random_seed=config.get("RandomSeed"), create_request=create)


def candidates(spec: TuningSpec, rng: random.Random) -> list[dict[str, str]]:
    """The tuned hyperparameters of each training job, in launch order: Grid, every combination
    of the categorical values (``itertools.product`` in request order; SageMaker's order is not
    documented); every other strategy, random search (distinct combinations while the space has
    them), ``spec.max_jobs`` of them."""
    if spec.strategy == "Grid":
        return [dict(zip([r.name for r in spec.ranges], combo, strict=True))
                for combo in itertools.product(*(r.values for r in spec.ranges))]
    out: list[dict[str, str]] = []
    seen: set[tuple[str, ...]] = set()
    for _ in range(spec.max_jobs * 100):
        pick = {r.name: r.sample(rng) for r in spec.ranges}
        key = tuple(pick.values())
        if key in seen:
            continue
        seen.add(key)
        out.append(pick)
        if len(out) == spec.max_jobs:
            break
    return out


def objective_hyperparameter(spec: TuningSpec) -> str:
    """``_tuning_objective_metric`` as the service sets it (see the module docstring)."""
    static = spec.definition.get("StaticHyperParameters") or {}
    return json.dumps(spec.objective_name) if FRAMEWORK_MARKER in static else spec.objective_name


#: TrainingJobDefinition members copied into each CreateTrainingJob request unchanged.
COPIED = ("RoleArn", "InputDataConfig", "OutputDataConfig", "StoppingCondition", "VpcConfig",
          "EnableNetworkIsolation", "EnableInterContainerTrafficEncryption", "EnableManagedSpotTraining",
          "CheckpointConfig", "RetryStrategy", "Environment")


def training_job_request(spec: TuningSpec, name: str, tuned: Mapping[str, str]) -> dict[str, Any]:
    """The CreateTrainingJob request of one training job (see the module docstring)."""
    d = spec.definition
    request: dict[str, Any] = {"TrainingJobName": name,
                               "HyperParameters": {**(d.get("StaticHyperParameters") or {}), **tuned,
                                                   OBJECTIVE_HP: objective_hyperparameter(spec)},
                               "AlgorithmSpecification": {k: v for k, v in d["AlgorithmSpecification"].items()}}
    resources = d.get("HyperParameterTuningResourceConfig") or d.get("ResourceConfig") or {}
    request["ResourceConfig"] = {k: v for k, v in resources.items()
                                 if k in ("InstanceType", "InstanceCount", "VolumeSizeInGB", "VolumeKmsKeyId",
                                          "KeepAlivePeriodInSeconds", "InstanceGroups")}
    for key in COPIED:
        if key in d:
            request[key] = d[key]
    return request


def training_job_name(tuning_name: str, index: int, rng: random.Random) -> str:
    return f"{tuning_name}-{index:03d}-{rng.getrandbits(32):08x}"


__all__ = ["METRIC_REQUIRED", "OBJECTIVE_HP", "RUN_AS_RANDOM", "Range", "TuningSpec", "candidates",
           "objective_hyperparameter", "training_job_name", "training_job_request", "validate"]
