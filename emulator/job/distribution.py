"""SDK v2 ``distribution=`` dicts → the hyperparameters the SageMaker Python SDK emits.

Mirrors ``sagemaker.pytorch.PyTorch`` (v2.257) and ``Framework._distribution_configuration``:
the same keys, JSON-encoded the same way, and the SDK's own error texts where it has one.
``pytorchddp`` is rewritten to ``smdistributed.dataparallel`` as the SDK does since v2.221.1;
``pytorchddp_encoding="pytorch_ddp"`` gives the 2022–2024 encoding
(``sagemaker_pytorch_ddp_enabled``) instead. Both run through the real toolkit's SMDataParallel
runner. Not emulated: ``pytorchxla``, ``parameter_server``, ``multi_worker_mirrored_strategy`` and
``smdistributed.modelparallel`` are refused with an error that says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ..errors import RequestError
from .instance_types import InstanceType

FIELD = "distribution"

#: Keys the SDK knows. Only the first four are emulated.
EMULATED_KEYS = ("torch_distributed", "pytorchddp", "smdistributed", "mpi")
SDK_ONLY_KEYS = ("pytorchxla", "parameter_server", "multi_worker_mirrored_strategy")
KNOWN_KEYS = (*EMULATED_KEYS, *SDK_ONLY_KEYS, "instance_groups")

#: Hyperparameters that make the toolkit choose a distributed runner (TK environment.py).
DISTRIBUTION_FLAGS = (
    "sagemaker_mpi_enabled",
    "sagemaker_parameter_server_enabled",
    "sagemaker_distributed_dataparallel_enabled",
    "sagemaker_pytorch_ddp_enabled",
    "sagemaker_pytorch_xla_multi_worker_enabled",
    "sagemaker_multi_worker_mirrored_strategy_enabled",
    "sagemaker_torch_distributed_enabled",
)

Runner = Literal["process", "mpi", "smdataparallel", "torch_distributed"]


def encode(value: Any) -> str:
    """JSON-encode one hyperparameter value exactly as the SDK does (``json.dumps``)."""
    return json.dumps(value)


def _enabled(section: Any, name: str) -> bool:
    if not isinstance(section, Mapping):
        raise RequestError(f"{FIELD}.{name}", f"must be a dict, got {type(section).__name__}",
                           allowed='{"enabled": true, ...}')
    return bool(section.get("enabled", False))


def distribution_hyperparameters(
    distribution: Mapping[str, Any] | None,
    instance_type: InstanceType,
    *,
    group_names: Sequence[str] = (),
    image_uri: str | None = None,
    pytorchddp_encoding: Literal["smdistributed", "pytorch_ddp"] = "smdistributed",
) -> dict[str, str]:
    """Return the JSON-encoded hyperparameters the SDK adds for ``distribution``.

    ``group_names`` are the job's instance-group names when it has heterogeneous groups.
    Raises :class:`RequestError` (field ``distribution…``) with the SDK's text where it has one.
    """
    if not distribution:
        return {}
    if not isinstance(distribution, Mapping):
        raise RequestError(FIELD, f"must be a dict, got {type(distribution).__name__}",
                           allowed="{" + ", ".join(f'"{k}": {{...}}' for k in EMULATED_KEYS) + "}")
    unknown = [k for k in distribution if k not in KNOWN_KEYS]
    if unknown:
        raise RequestError(FIELD, f"unknown distribution key {unknown[0]!r}",
                           allowed=", ".join(KNOWN_KEYS))
    dist = dict(distribution)
    if "pytorchddp" in dist and "smdistributed" in dist:
        raise RequestError(
            FIELD, "Cannot use both pytorchddp and smdistributed distribution options together.")
    for key in SDK_ONLY_KEYS:
        if key in dist:
            raise RequestError(f"{FIELD}.{key}", "not emulated (the emulator runs PyTorch on CPU)",
                               allowed=", ".join(EMULATED_KEYS))
    strategies = [k for k in EMULATED_KEYS if k in dist]
    if len(strategies) > 1:
        raise RequestError(FIELD, f"two distributions at once: {' and '.join(strategies)}",
                           allowed="exactly one of " + ", ".join(EMULATED_KEYS))

    if instance_type.is_trainium and strategies and strategies[0] != "torch_distributed":
        name = "smdistributed" if strategies[0] == "pytorchddp" else strategies[0]
        raise RequestError(  # the SDK's text (fw_utils.validate_distribution_for_instance_type)
            FIELD, f"Provided distribution strategy {name} is not supported for Trainium instances.\n"
            "Please specify one of the following supported distribution strategies: ['torch_distributed'] \n",
            allowed="torch_distributed")

    hps: dict[str, str] = {}
    if "pytorchddp" in dist:
        enabled = _enabled(dist["pytorchddp"], "pytorchddp")
        if pytorchddp_encoding == "pytorch_ddp":
            hps["sagemaker_pytorch_ddp_enabled"] = encode(enabled)
            hps["sagemaker_instance_type"] = encode(instance_type.name)
        else:
            dist = {"smdistributed": {"dataparallel": dist["pytorchddp"]}}
    if "smdistributed" in dist:
        sm = dist["smdistributed"]
        if not isinstance(sm, Mapping):
            raise RequestError(f"{FIELD}.smdistributed", "must be a dict",
                               allowed='{"dataparallel": {"enabled": true}}')
        if len(sm) > 1:
            raise RequestError(f"{FIELD}.smdistributed", "Cannot use more than 1 smdistributed strategy.")
        for strategy in sm:
            if strategy == "modelparallel":
                raise RequestError(f"{FIELD}.smdistributed.modelparallel",
                                   "not emulated (SageMaker model parallelism needs its own library)",
                                   allowed="dataparallel")
            if strategy != "dataparallel":
                raise RequestError(f"{FIELD}.smdistributed",
                                   f"Invalid smdistributed strategy provided: {strategy}",
                                   allowed="dataparallel")
        if instance_type.name == "ml.p5.48xlarge":
            raise RequestError(FIELD, "SMModelParallel and SMDataParallel currently do not support p5 instances.")
        dp = sm.get("dataparallel", {})
        enabled = _enabled(dp, "smdistributed.dataparallel")
        hps["sagemaker_distributed_dataparallel_enabled"] = encode(enabled)
        hps["sagemaker_instance_type"] = encode(instance_type.name)
        hps["sagemaker_distributed_dataparallel_custom_mpi_options"] = encode(
            dp.get("custom_mpi_options", ""))
    if "torch_distributed" in dist:
        enabled = _enabled(dist["torch_distributed"], "torch_distributed")
        # its refusals (CPU types, versions, entry point): emulator.job.sdk_refusals, with the SDK's text
        hps["sagemaker_torch_distributed_enabled"] = encode(enabled)
        hps["sagemaker_instance_type"] = encode(instance_type.name)
    if "mpi" in dist:
        mpi = dist["mpi"]
        enabled = _enabled(mpi, "mpi")
        hps["sagemaker_mpi_enabled"] = encode(enabled)
        if "processes_per_host" in mpi:
            pph = mpi["processes_per_host"]
            if not isinstance(pph, int) or isinstance(pph, bool) or pph < 1:
                raise RequestError(f"{FIELD}.mpi.processes_per_host", f"must be a positive integer, got {pph!r}")
            hps["sagemaker_mpi_num_of_processes_per_host"] = encode(pph)
        hps["sagemaker_mpi_custom_mpi_options"] = encode(mpi.get("custom_mpi_options", ""))

    groups = distribution.get("instance_groups")
    if groups is not None:
        names = [getattr(g, "instance_group_name", g) for g in groups]
        if not group_names:
            raise RequestError(f"{FIELD}.instance_groups", "Instance groups not specified in the estimator !")
        if len(names) > len(group_names):
            raise RequestError(f"{FIELD}.instance_groups", "Train instance groups oversubscribed !")
        if len(group_names) > 1 and len(names) != 1:
            raise RequestError(f"{FIELD}.instance_groups",
                               "Distribution should only contain one instance group name !")
        for name in names:
            if name not in group_names:
                raise RequestError(f"{FIELD}.instance_groups", f"Invalid training instance group {name}",
                                   allowed=", ".join(group_names))
        if "mpi" in dist or "smdistributed" in dist:
            hps["sagemaker_distribution_instance_groups"] = encode(list(names))
    return hps


def decode(value: str) -> Any:
    """Decode one hyperparameter string as the toolkit does: JSON, else the raw string."""
    try:
        return json.loads(value)
    except (ValueError, TypeError):
        return value


def runner_for(hyperparameters: Mapping[str, str], *, in_distribution_group: bool = True) -> Runner:
    """The PyTorch toolkit's runner choice for these hyperparameters (wire form; PTK ``training.py``)."""
    if not in_distribution_group:
        return "process"
    return runner_of({k: decode(v) for k, v in hyperparameters.items()})


def runner_of(hp: Mapping[str, Any]) -> Runner:
    """:func:`runner_for` on hyperparameters already decoded (:func:`decode`)."""
    if hp.get("sagemaker_mpi_enabled"):
        return "mpi"
    if hp.get("sagemaker_pytorch_ddp_enabled"):
        return "smdataparallel"
    if hp.get("sagemaker_torch_distributed_enabled"):
        return "torch_distributed"
    if hp.get("sagemaker_distributed_dataparallel_enabled"):
        return "smdataparallel"
    return "process"
