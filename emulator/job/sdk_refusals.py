"""The SageMaker Python SDK's refusals of a PyTorch estimator, for requests that bypass the SDK.

A job launched through the SDK (``sagemaker.pytorch.PyTorch`` or ``ModelTrainer``) gets these from
the real SDK before the emulator sees it. ``emulator.run``, ``python -m emulator run`` and the
pytest fixture build the request themselves; :func:`check` raises, with the SDK's own text, each
``ValueError`` SDK v2.257's ``PyTorch`` estimator raises at construction or ``fit()`` for the
same arguments that :mod:`emulator.job.distribution` does not already raise:

* ``entry_point`` an ``s3://`` URI (``Framework.__init__``);
* ``smdistributed.dataparallel`` (or ``pytorchddp``, which the SDK rewrites to it) on a
  ``framework_version``/``py_version`` the SDK does not list (``fw_utils._validate_smdataparallel_args``);
* ``torch_distributed`` with a ``py_version`` without ``py3``, on a GPU or Trainium type with a
  ``framework_version`` the SDK does not list, on a CPU type, or with an entry point that is not
  ``*.py`` (``fw_utils.validate_torch_distributed_distribution``; one message for all, as there);
* ``smdistributed`` with the one DLC image the SDK refuses for it
  (``Framework.UNSUPPORTED_DLC_IMAGE_FOR_SM_PARALLELISM``);
* instance groups named in ``distribution`` with neither MPI nor SMDDP enabled
  (``Framework._distribution_configuration``).

As in the SDK, the version checks are skipped when an ``image_uri`` is given. Not reproduced,
on purpose: the SDK's refusal of a missing ``framework_version``/``py_version`` (the emulator's own
defaults: today's torch, or the family DLC's Python) and of a ``framework_version`` its image table
does not know yet (2.9 and later for SDK v2.257; the emulator's family table covers them, for SDK
v3 and ``image_uri`` launches). ``"current"`` is the emulator's own and is never checked.
The tables below are facts copied from ``sagemaker/fw_utils.py`` and ``sagemaker/estimator.py``
of sagemaker 2.257 (https://github.com/aws/sagemaker-python-sdk, branch ``master-v2``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import RequestError
from .frameworks import CURRENT
from .instance_types import InstanceType

#: ``fw_utils.SM_DATAPARALLEL_SUPPORTED_FRAMEWORK_VERSIONS["pytorch"]``.
SMDATAPARALLEL_VERSIONS = (
    "1.6", "1.6.0", "1.7", "1.7.1", "1.8", "1.8.0", "1.8.1", "1.9", "1.9.0", "1.9.1", "1.10", "1.10.0",
    "1.10.2", "1.11", "1.11.0", "1.12", "1.12.0", "1.12.1", "1.13.1", "2.0.0", "2.0.1", "2.1.0", "2.1.2",
    "2.2.0",
)
#: ``fw_utils.TORCH_DISTRIBUTED_GPU_SUPPORTED_FRAMEWORK_VERSIONS``.
TORCH_DISTRIBUTED_GPU_VERSIONS = (
    "1.13.1", "2.0.0", "2.0.1", "2.1.0", "2.1.2", "2.2.0", "2.3.0", "2.3.1", "2.4.1", "2.5.1", "2.6.0",
    "2.7.1", "2.8.0",
)
#: ``fw_utils.TRAINIUM_SUPPORTED_TORCH_DISTRIBUTED_FRAMEWORK_VERSIONS``.
TORCH_DISTRIBUTED_TRAINIUM_VERSIONS = ("1.11", "1.11.0", "1.12", "1.12.0", "1.12.1", "1.13.1", "2.0.0")
#: ``Framework.UNSUPPORTED_DLC_IMAGE_FOR_SM_PARALLELISM``: matched as a substring of ``image_uri``.
SMDISTRIBUTED_UNSUPPORTED_IMAGES = ("2.0.1-gpu-py310-cu121",)

FIELD = "distribution"


def _section_enabled(distribution: Mapping[str, Any], *path: str) -> bool:
    section: Any = distribution
    for key in path:
        section = section.get(key) if isinstance(section, Mapping) else None
    return isinstance(section, Mapping) and bool(section.get("enabled", False))


def _listing(versions: Sequence[str]) -> str:
    return str(list(versions))  # the SDK formats the list with Python's repr


def check_entry_point(entry_point: str) -> None:
    """``Framework.__init__``: an ``s3://`` entry point."""
    if entry_point.startswith("s3://"):
        raise RequestError("entry_point",
                           f"Invalid entry point script: {entry_point}. Must be a path to a local file.")


def check(*, distribution: Mapping[str, Any] | None, groups: Sequence[tuple[str, InstanceType]],
          heterogeneous: bool, framework_version: str | None, py_version: str | None,
          image_uri: str | None, entry_point: str) -> None:
    """Raise the SDK's ``ValueError`` text (as a :class:`RequestError`) for what the SDK would
    refuse in ``distribution`` given the versions, the instance groups (name and type; one
    unnamed group for a homogeneous cluster) and the entry point. ``py_version`` is the one the job
    runs with (the family DLC's when the caller gave none). Call it after
    :func:`emulator.job.distribution.distribution_hyperparameters` has checked the distribution's shape."""
    if not distribution or not isinstance(distribution, Mapping):
        return
    named = distribution.get("instance_groups")
    if heterogeneous and len(groups) > 1 and not named:  # fw_utils.validate_distribution
        raise RequestError(f"{FIELD}.instance_groups", "Distribution should only contain one instance group name !")
    if heterogeneous and named:  # the SDK checks the training group(s) the distribution names
        wanted = {getattr(g, "instance_group_name", g) for g in named}
        instance_types = [t for name, t in groups if name in wanted]
    else:
        instance_types = [t for _, t in groups]
    dist = dict(distribution)
    if "pytorchddp" in dist and "smdistributed" not in dist:
        dist["smdistributed"] = {"dataparallel": dist.pop("pytorchddp")}
    version = None if framework_version in (None, CURRENT) else framework_version
    py = py_version or ""
    versions_checked = not image_uri and version is not None
    for itype in instance_types:
        if _section_enabled(dist, "smdistributed", "dataparallel") and versions_checked:
            msg = ""
            if version not in SMDATAPARALLEL_VERSIONS:
                msg += (f"Provided framework_version {version} is not supported by smdataparallel.\n"
                        "Please specify one of the supported framework versions: "
                        f"{_listing(SMDATAPARALLEL_VERSIONS)} \n")
            if "py3" not in py:
                msg += (f"Provided py_version {py_version} is not supported by smdataparallel.\n"
                        "Please specify py_version>=py3")
            if msg:
                raise RequestError(f"{FIELD}.smdistributed.dataparallel", msg)
        if _section_enabled(dist, "torch_distributed"):
            msg = ""
            if not image_uri:
                if versions_checked and "py3" not in py:
                    msg += (f"Provided py_version {py_version} is not supported by torch_distributed.\n"
                            "Please specify py_version>=py3\n")
                allowed = (TORCH_DISTRIBUTED_GPU_VERSIONS if itype.is_gpu else
                           TORCH_DISTRIBUTED_TRAINIUM_VERSIONS if itype.is_trainium else None)
                if allowed is None:
                    msg += "Currently torch_distributed is supported only for GPU and Trainium instances.\n"
                elif versions_checked and version not in allowed:
                    msg += (f"Provided framework_version {version} is not supported by torch_distributed "
                            f"for instance {itype.name}.\nPlease specify one of the supported framework "
                            f"versions:{_listing(allowed)} \n")
            if not entry_point.endswith(".py"):
                msg += ("Unsupported entry point type for the distribution torch_distributed.\n"
                        "Only python programs (*.py) are supported.")
            if msg:
                raise RequestError(f"{FIELD}.torch_distributed", msg)
    torch_distributed = _section_enabled(dist, "torch_distributed")
    if "smdistributed" in dist and not torch_distributed:
        for image in SMDISTRIBUTED_UNSUPPORTED_IMAGES:
            if image in (image_uri or ""):
                raise RequestError("image_uri", f"SMDistributed is currently incompatible with DLC image: "
                                   f"{image_uri}. (Could be due to CUDA version being greater than 11.)")
    # Framework._distribution_configuration runs unless torch_distributed is enabled (PyTorch's
    # own branch); the SDK names the groups in the distribution whenever the estimator has them.
    if heterogeneous and not torch_distributed and not (
            _section_enabled(dist, "mpi") or _section_enabled(dist, "smdistributed", "dataparallel")):
        raise RequestError(f"{FIELD}.instance_groups",
                           "Don't set training instance groups while no distribution strategies enabled!")
