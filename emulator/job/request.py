"""The job request: what to run, in the shape of SageMaker's CreateTrainingJob request.

A :class:`JobRequest` is a frozen value. Build it with :func:`create` (the keyword arguments the
SDK's ``PyTorch`` estimator takes), or from a CreateTrainingJob dict (:func:`from_create_training_job`,
used by the SDK session). Either way it is validated once, here, before anything touches the
filesystem or starts a host; every error is a :class:`~emulator.errors.RequestError` that names the
field and what is allowed.

Hyperparameters are stored as the SDK sends them: a map of string to string — JSON-encoded with the
``sagemaker_*`` keys for SDK v2 estimators, plain strings with no ``sagemaker_*`` keys for SDK v3's
``ModelTrainer``, written to ``hyperparameters.json`` as given either way.

A request with ``AlgorithmSpecification.ContainerEntrypoint`` (SDK v3 always sends one) needs no
entry point: the container runs that command instead of the image's ``train``, and the code
arrives as a channel.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from ..errors import RequestError
from ..inhost import protocol as P
from . import distribution as dist
from . import dlc, frameworks, profiles, sdk_refusals
from .frameworks import Selection
from .instance_types import DEFAULT_INSTANCE_TYPE, InstanceType, lookup, refuse_neuron
from .metrics import MetricDefinition, parse_definitions

#: Limits from the CreateTrainingJob API model (botocore ``sagemaker/2017-07-24/service-2.json``).
#: ``TrainingContainerEntrypoint``/``TrainingContainerArguments``: 1-100 strings of 0-256 characters.
CONTAINER_COMMAND_ITEMS = (1, 100)
CONTAINER_COMMAND_ITEM_LENGTH = 256
JOB_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
MAX_RUNTIME_DEFAULT = 86_400
MAX_RUNTIME_LIMIT = 28 * 86_400
#: ``gpu_memory``: emulated GPUs count their memory (and run out of it), or not.
GPU_MEMORY_MODES = ("count", "off")
#: The emulator runs every host on this machine; more than this is refused.
MAX_HOSTS = 64
CHANNEL_NAME_RE = re.compile(r"^[A-Za-z0-9\.\-_]+$")
ENV_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
DEFAULT_REGION = P.DEFAULT_REGION
HOMOGENEOUS_GROUP = "homogeneousCluster"
CHECKPOINT_DEFAULT = P.CHECKPOINT_DIR
#: Never passed by ``pass_env`` (``forward_aws_credentials`` is the explicit switch for them).
CREDENTIAL_VARIABLES = frozenset({"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"})


@dataclass(frozen=True)
class InstanceGroup:
    """One instance group (``ResourceConfig.InstanceGroups``), or the homogeneous cluster."""

    name: str
    instance_type: str
    count: int

    @property
    def type(self) -> InstanceType:
        return lookup(self.instance_type)


@dataclass(frozen=True)
class Channel:
    """One input channel: a local folder mounted read-only at ``/opt/ml/input/data/<name>``."""

    name: str
    path: Path
    content_type: str | None = None
    input_mode: Literal["File"] = "File"
    s3_distribution_type: Literal["FullyReplicated", "ShardedByS3Key"] = "FullyReplicated"
    #: Copy the files into each host's tree (writable, as SageMaker's download is) instead of the
    #: read-only mount. SDK v3's ``code`` and ``sm_drivers`` channels need it: its ``sm_train.sh``
    #: runs ``chmod +x`` in ``sm_drivers`` and may unpack a ``.tar.gz`` in ``code``.
    copy: bool = False

    def config(self) -> dict[str, str]:
        """This channel's entry in ``inputdataconfig.json`` (real-job shape)."""
        cfg = {"TrainingInputMode": self.input_mode, "S3DistributionType": self.s3_distribution_type,
               "RecordWrapperType": "None"}
        if self.content_type:
            cfg["ContentType"] = self.content_type
        return cfg


@dataclass(frozen=True)
class JobRequest:
    """A training job, as CreateTrainingJob would carry it, plus the emulator's own options."""

    job_name: str
    entry_point: str
    source_dir: Path
    hyperparameters: Mapping[str, str]
    instance_groups: tuple[InstanceGroup, ...]
    output_path: Path
    channels: tuple[Channel, ...] = ()
    gpus_per_host: int | None = None
    max_runtime_seconds: int = MAX_RUNTIME_DEFAULT
    checkpoint_local_path: str = CHECKPOINT_DEFAULT
    checkpoint_dir: Path | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    region: str = DEFAULT_REGION
    image_uri: str | None = None
    forward_aws_credentials: bool = False
    heterogeneous: bool = False
    #: Opt-in deviation: cap the toolkit's 30-s MPI-family waits at 1 s, its 1-s polls at 0.2 s.
    short_toolkit_sleeps: bool = False
    #: Opt-in: start the toolkit, torchrun and the ranks that pass its checks from shared
    #: pre-imported interpreters (process backend; see emulator/inhost/site/_sm_emulator_faststart.py).
    fast_start: bool = False
    #: ``exact`` or ``ci`` (:mod:`emulator.job.profiles`): which speed-ups run on top of the switches above.
    profile: str = profiles.EXACT
    #: ``AlgorithmSpecification.ContainerEntrypoint``/``ContainerArguments`` (SDK v3 sends them):
    #: the container command is ``entrypoint + arguments``; None runs the image's ``train``.
    container_entrypoint: tuple[str, ...] | None = None
    container_arguments: tuple[str, ...] | None = None
    #: Names of the caller's environment variables passed into every host (nothing else of the
    #: caller's environment is; see :mod:`emulator.job.plan`).
    pass_env: tuple[str, ...] = ()
    #: A requirements file the container installs before training, when it is not the toolkit's
    #: ``<source_dir>/requirements.txt`` (SDK v3: ``SourceCode.requirements``, inside the ``code``
    #: channel). The job environment is prepared from it (see :mod:`emulator.backends.jobenv`).
    requirements_file: Path | None = None
    #: The order of each instance group's ``hosts`` in ``resourceconfig.json`` (every host of the
    #: job once); None: sorted lexicographically, as SageMaker documents (see :mod:`emulator.job.plan`).
    host_order: tuple[str, ...] | None = None
    #: The SMDDP stand-in refuses what it only infers SMDDP does not support (default: warns).
    smddp_strict: bool = False
    #: Leave a job whose rendezvous cannot complete waiting, as SageMaker does (default: the
    #: emulator names the error and stops the job as Failed; see :mod:`emulator.diagnostics.rendezvous`).
    wait_on_rendezvous_errors: bool = False
    #: The estimator's ``framework_version``/``py_version`` (SDK v2 sends them as the DLC
    #: ``image_uri`` instead, which :attr:`framework` reads); ``"current"``: today's torch.
    framework_version: str | None = None
    py_version: str | None = None
    #: ``AlgorithmSpecification.MetricDefinitions``: what the emulator reads from the hosts' logs
    #: into ``FinalMetricDataList`` (see :mod:`emulator.job.metrics`).
    metric_definitions: tuple[MetricDefinition, ...] = ()
    #: Emulated GPUs count the memory CUDA would hold (``count``, default) or not (``off``: the memory
    #: API answers 0 and the whole device free, nothing runs out); see ``_sm_emulator_memory``.
    gpu_memory: str = "off"
    #: Memory per emulated GPU in GiB, less than the instance type's (a MIG slice, a GPU shared with
    #: other work); None: the type's GPU memory as CUDA reports it.
    gpu_memory_gib: float | None = None

    def gpu_capacity(self, itype: InstanceType) -> int:
        """Bytes per emulated GPU on ``itype``: the override where given, else the type's."""
        if self.gpu_memory_gib is not None and itype.is_gpu:
            return int(self.gpu_memory_gib * (1 << 30))
        return itype.gpu_memory

    @property
    def framework(self) -> Selection | None:
        """The torch, Python and toolkits the job asks for (:mod:`emulator.job.frameworks`), from
        ``framework_version``/``py_version`` or a DLC ``image_uri``; None: nothing asked."""
        return frameworks.select(self.framework_version, self.py_version, image_uri=self.image_uri)

    @property
    def dlc_image(self) -> dlc.Image:
        """The DLC image whose packages the job sees (:func:`emulator.job.frameworks.image_of`: the
        first instance group's type picks the CPU or GPU image, as one ``TrainingImage`` serves all)."""
        return frameworks.image_of(self.framework, self.instance_groups[0].type)

    def has_smddp(self, itype: InstanceType) -> bool:
        """Whether hosts of ``itype`` find SMDDP (``smdistributed.dataparallel``, ``smddprun``): GPU
        types whose image ships it (AWS's files: the GPU images up to PyTorch 2.5). With no DLC named,
        every GPU type (the emulator's default world keeps the stand-in)."""
        if not itype.is_gpu:
            return False
        selection = self.framework
        return selection is None or selection.family is None or self.dlc_image.has_smddp

    def speedups(self) -> profiles.Profile:
        """What this job runs with: its profile, plus the speed-ups it asked for itself."""
        return profiles.get(self.profile).with_requested(short_toolkit_sleeps=self.short_toolkit_sleeps,
                                                         fast_start=self.fast_start)

    @property
    def container_command(self) -> tuple[str, ...] | None:
        """Each host's container command: ``ContainerEntrypoint + ContainerArguments`` when the
        request names an entrypoint, else None (the image's ``train``)."""
        if self.container_entrypoint is None:
            return None
        return (*self.container_entrypoint, *(self.container_arguments or ()))

    @property
    def hosts(self) -> list[str]:
        """``algo-1 … algo-N`` over all groups, in group order."""
        return host_names(self.host_count)

    @property
    def host_count(self) -> int:
        return sum(g.count for g in self.instance_groups)

    def group_of(self, host: str) -> InstanceGroup:
        index = int(host.split("-")[1]) - 1
        for group in self.instance_groups:
            if index < group.count:
                return group
            index -= group.count
        raise KeyError(host)

    def gpus_on(self, host: str) -> int:
        """Emulated GPUs on ``host``: the type's count, or the override where it applies."""
        itype = self.group_of(host).type
        if self.gpus_per_host is not None and itype.is_gpu:
            return self.gpus_per_host
        return itype.gpus

    @property
    def arn(self) -> str:
        return f"arn:aws:sagemaker:{self.region}:{P.ACCOUNT_ID}:training-job/{self.job_name.lower()}"

    @property
    def job_dir(self) -> Path:
        """Where this job's results go: ``<output_path>/<job_name>``."""
        return self.output_path / self.job_name

    def to_dict(self, *, training_image: str | None = None) -> dict[str, Any]:
        """A JSON-ready view (for ``plan`` and ``job.json``); ``training_image``: what
        ``AlgorithmSpecification.TrainingImage`` says when the request names no image (the
        backend's: the image its hosts run, or its own placeholder)."""
        return {
            "TrainingJobName": self.job_name,
            "HyperParameters": dict(self.hyperparameters),
            "ResourceConfig": self.resource_config(),
            "StoppingCondition": {"MaxRuntimeInSeconds": self.max_runtime_seconds},
            "InputDataConfig": [
                {"ChannelName": c.name, "DataSource": {"FileDataSource": {"FileUri": c.path.as_uri()}},
                 **({"ContentType": c.content_type} if c.content_type else {}),
                 "InputMode": c.input_mode}
                for c in self.channels
            ],
            "OutputDataConfig": {"S3OutputPath": self.output_path.as_uri()},
            "CheckpointConfig": {"LocalPath": self.checkpoint_local_path,
                                 **({"S3Uri": self.checkpoint_dir.as_uri()} if self.checkpoint_dir else {})},
            "Environment": dict(self.environment),
            "AlgorithmSpecification": {"TrainingImage": self.image_uri or training_image,
                                       "TrainingInputMode": "File",
                                       **({"ContainerEntrypoint": list(self.container_entrypoint)}
                                          if self.container_entrypoint is not None else {}),
                                       **({"ContainerArguments": list(self.container_arguments)}
                                          if self.container_arguments is not None else {}),
                                       **({"MetricDefinitions": [d.to_dict() for d in self.metric_definitions]}
                                          if self.metric_definitions else {})},
        }

    def resource_config(self) -> dict[str, Any]:
        return resource_config(self.instance_groups, heterogeneous=self.heterogeneous)


def host_names(count: int) -> list[str]:
    """``algo-1 … algo-<count>``: SageMaker's host names."""
    return [f"algo-{i}" for i in range(1, count + 1)]


def host_order(host: str) -> tuple[int, str]:
    """Sort key putting ``algo-2`` before ``algo-10`` (names that are not ``<name>-N`` last)."""
    _, _, n = host.rpartition("-")
    return (int(n), host) if n.isdigit() else (1 << 30, host)


def default_job_name(base: str = "emulator") -> str:
    """``<base>-YYYY-MM-DD-HH-MM-SS-mmm`` as the SDK's ``name_from_base`` builds it."""
    now = time.time()
    stamp = time.strftime("%Y-%m-%d-%H-%M-%S", time.gmtime(now)) + f"-{int(now * 1000) % 1000:03d}"
    return f"{base[: 63 - len(stamp) - 1]}-{stamp}"


def _local_path(value: str | os.PathLike[str], field_name: str) -> Path:
    text = os.fspath(value)
    if "://" in text:
        parsed = urlparse(text)
        if parsed.scheme != "file":
            raise RequestError(field_name, f"unsupported URI scheme {parsed.scheme!r} in {text!r}",
                               allowed="a local folder or a file:// URI (s3:// through the SDK session)")
        text = parsed.path
    return Path(text).expanduser().absolute()


def create(
    *,
    entry_point: str | os.PathLike[str],
    source_dir: str | os.PathLike[str] | None = None,
    instance_count: int = 1,
    instance_type: str = DEFAULT_INSTANCE_TYPE,
    instance_groups: Sequence[InstanceGroup] | None = None,
    gpus_per_host: int | None = None,
    distribution: Mapping[str, Any] | None = None,
    hyperparameters: Mapping[str, Any] | None = None,
    channels: Mapping[str, str | os.PathLike[str] | Mapping[str, Any]] | None = None,
    environment: Mapping[str, str] | None = None,
    output_path: str | os.PathLike[str] = "./out",
    max_run: int = MAX_RUNTIME_DEFAULT,
    job_name: str | None = None,
    base_job_name: str = "emulator",
    checkpoint_local_path: str | None = None,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    region: str = DEFAULT_REGION,
    image_uri: str | None = None,
    forward_aws_credentials: bool = False,
    pytorchddp_encoding: Literal["smdistributed", "pytorch_ddp"] = "smdistributed",
    container_log_level: int = 20,
    short_toolkit_sleeps: bool = False,
    fast_start: bool = False,
    pass_env: Sequence[str] = (),
    host_order: Sequence[str] | None = None,
    smddp_strict: bool = False,
    wait_on_rendezvous_errors: bool = False,
    framework_version: str | None = None,
    py_version: str | None = None,
    profile: str | None = None,
    metric_definitions: Sequence[Mapping[str, str]] | None = None,
    gpu_memory: str = "off",
    gpu_memory_gib: float | None = None,
) -> JobRequest:
    """Build and validate a request from the keyword arguments the SDK estimator takes.

    ``hyperparameters`` are plain Python values; they are JSON-encoded as the SDK encodes them,
    and the SDK's ``sagemaker_*`` keys are added (program, submit directory, log level, job name,
    region, and the distribution's keys). ``metric_definitions``: the estimator's
    ``[{"Name": …, "Regex": …}]``, sent as ``AlgorithmSpecification.MetricDefinitions``.
    ``profile``: ``exact`` or ``ci``; unset, ``$SAGEMAKER_EMULATOR_PROFILE``, else ``exact``.
    """
    if isinstance(entry_point, str):
        sdk_refusals.check_entry_point(entry_point)
    if source_dir is None:
        ep = _local_path(entry_point, "entry_point")
        source, entry = ep.parent, ep.name
    else:
        source = _local_path(source_dir, "source_dir")
        entry = os.fspath(entry_point)
    name = job_name if job_name is not None else default_job_name(base_job_name)
    if checkpoint_local_path is not None and checkpoint_dir is None:
        raise RequestError("CheckpointConfig.LocalPath", f"{checkpoint_local_path!r} given without "
                           "CheckpointConfig.S3Uri (checkpoint_dir): the SageMaker SDK sends no CheckpointConfig "
                           "then, so nothing restores or syncs that folder",
                           allowed="checkpoint_dir (standing for checkpoint_s3_uri) with it, or neither")
    if instance_groups:
        groups = tuple(instance_groups)
        hetero = True
    else:
        _check_count(instance_count, "ResourceConfig.InstanceCount")
        groups = (InstanceGroup(HOMOGENEOUS_GROUP, instance_type, instance_count),)
        hetero = False
    if not isinstance(hyperparameters, Mapping | None):
        raise RequestError("HyperParameters", f"must be a JSON object, got {type(hyperparameters).__name__}")
    for value, field_name in ((channels, "InputDataConfig"), (environment, "Environment")):
        if not isinstance(value, Mapping | None):
            raise RequestError(field_name, f"must be a mapping of name to value, got {type(value).__name__}",
                               allowed="a dict")
    user_hps = dict(hyperparameters or {})
    for key in user_hps:
        if not isinstance(key, str):
            raise RequestError("HyperParameters", f"key {key!r} is not a string")
    first_type = _validate_groups(groups)
    hps = {k: dist.encode(v) for k, v in user_hps.items()}
    hps.update(dist.distribution_hyperparameters(
        distribution, first_type, group_names=[g.name for g in groups] if hetero else [],
        image_uri=image_uri, pytorchddp_encoding=pytorchddp_encoding))
    sdk_refusals.check(distribution=distribution, groups=[(g.name, g.type) for g in groups], heterogeneous=hetero,
                       framework_version=framework_version, py_version=_job_py_version(framework_version, py_version),
                       image_uri=image_uri, entry_point=entry)
    hps.update({
        "sagemaker_program": dist.encode(entry),
        "sagemaker_submit_directory": dist.encode(P.CODE_DIR),
        "sagemaker_container_log_level": dist.encode(container_log_level),
        "sagemaker_job_name": dist.encode(name),
        "sagemaker_region": dist.encode(region),
    })
    wire: dict[str, Any] = {
        "TrainingJobName": name,
        "HyperParameters": hps,
        "ResourceConfig": resource_config(groups, heterogeneous=hetero),
        "StoppingCondition": {"MaxRuntimeInSeconds": max_run},
        "Environment": dict(environment or {}),
        "AlgorithmSpecification": {**({"TrainingImage": image_uri} if image_uri else {}),
                                   **({"MetricDefinitions": metric_definitions}
                                      if metric_definitions is not None else {})},
        **({"CheckpointConfig": {"LocalPath": checkpoint_local_path}} if checkpoint_local_path else {}),
    }
    request = from_wire(
        wire,
        entry_point=entry,
        source_dir=source,
        output_path=_local_path(output_path, "OutputDataConfig.S3OutputPath"),
        channels=tuple(_channel(n, p) for n, p in (channels or {}).items()),
        checkpoint_dir=_local_path(checkpoint_dir, "CheckpointConfig.S3Uri") if checkpoint_dir else None,
        region=region,
        gpus_per_host=gpus_per_host,
        forward_aws_credentials=forward_aws_credentials,
        short_toolkit_sleeps=short_toolkit_sleeps,
        fast_start=fast_start,
        pass_env=_names(pass_env, "pass_env"),
        host_order=None if host_order is None else _host_names(host_order, groups),
        smddp_strict=smddp_strict,
        wait_on_rendezvous_errors=wait_on_rendezvous_errors,
        framework_version=framework_version,
        py_version=py_version,
        profile=profiles.resolve(profile),
        gpu_memory=gpu_memory,
        gpu_memory_gib=gpu_memory_gib,
    )
    validate(request)
    return request


def resource_config(groups: Sequence[InstanceGroup], *, heterogeneous: bool) -> dict[str, Any]:
    """``ResourceConfig`` as CreateTrainingJob carries ``groups`` (``VolumeSizeInGB`` as the SDK's default)."""
    if not heterogeneous:
        g = groups[0]
        return {"InstanceType": g.instance_type, "InstanceCount": g.count, "VolumeSizeInGB": 30}
    return {"InstanceGroups": [{"InstanceGroupName": g.name, "InstanceType": g.instance_type,
                                "InstanceCount": g.count} for g in groups],
            "VolumeSizeInGB": 30}


def from_wire(create: Mapping[str, Any], *, entry_point: str, source_dir: Path, output_path: Path,
              channels: tuple[Channel, ...] = (), checkpoint_dir: Path | None = None,
              region: str = DEFAULT_REGION, **options: Any) -> JobRequest:
    """The one builder of a :class:`JobRequest`: a CreateTrainingJob request (the wire form, as the
    SDK sends it) whose locations (code, output, channels, checkpoint ``S3Uri``) the caller has
    already resolved to folders of this machine, plus the emulator's own ``options`` (the
    :class:`JobRequest` fields CreateTrainingJob has no word for). Both front ends build it:
    :func:`create` (an estimator's keyword arguments, encoded as the SDK encodes them) and
    :mod:`emulator.sdk.translate` (what the real SDK sent). Not validated: each caller validates."""
    rc = create.get("ResourceConfig") or {}
    if rc.get("InstanceGroups"):
        groups = tuple(InstanceGroup(g["InstanceGroupName"], g["InstanceType"], g["InstanceCount"])
                       for g in rc["InstanceGroups"])
    else:
        groups = (InstanceGroup(HOMOGENEOUS_GROUP, rc.get("InstanceType", ""), rc.get("InstanceCount", 0)),)
    algo = create.get("AlgorithmSpecification") or {}
    entrypoint, arguments = container_command(algo.get("ContainerEntrypoint"), algo.get("ContainerArguments"))
    return JobRequest(
        job_name=create.get("TrainingJobName", ""),
        entry_point=entry_point,
        source_dir=source_dir,
        hyperparameters=dict(create.get("HyperParameters") or {}),
        instance_groups=groups,
        heterogeneous=bool(rc.get("InstanceGroups")),
        output_path=output_path,
        channels=channels,
        max_runtime_seconds=(create.get("StoppingCondition") or {}).get("MaxRuntimeInSeconds", MAX_RUNTIME_DEFAULT),
        checkpoint_local_path=(create.get("CheckpointConfig") or {}).get("LocalPath") or CHECKPOINT_DEFAULT,
        checkpoint_dir=checkpoint_dir,
        environment=dict(create.get("Environment") or {}),
        region=region,
        image_uri=algo.get("TrainingImage"),
        container_entrypoint=entrypoint,
        container_arguments=arguments,
        metric_definitions=parse_definitions(algo.get("MetricDefinitions")),
        **options,
    )


def _job_py_version(framework_version: Any, py_version: Any) -> str | None:
    """The ``py_version`` a job runs with: the caller's, else its framework family DLC's."""
    if py_version is not None or not isinstance(framework_version, str):
        return py_version if isinstance(py_version, str) else None
    selection = frameworks.select(framework_version)
    return selection.py_version if selection is not None else None


def _host_names(value: Any, groups: Sequence[InstanceGroup]) -> tuple[str, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        hosts = host_names(sum(g.count for g in groups if isinstance(g.count, int)))
        raise RequestError("host_order", f"must be a list of host names, got {value!r}",
                           allowed=_host_order_allowed(hosts))
    return tuple(value)


def _host_order_allowed(hosts: Sequence[str]) -> str:
    shown = ", ".join(hosts) if len(hosts) <= 6 else f"{hosts[0]} … {hosts[-1]}"
    return f"every host of the job once, in any order ({shown}), e.g. {json.dumps(list(reversed(hosts[:2])))}"


def _channel(name: str, value: Any) -> Channel:
    """A channel from a folder, or from ``{"path": folder, "distribution": "ShardedByS3Key"}`` (the
    SDK's ``TrainingInput(s3_data=..., distribution=...)``)."""
    where = f"InputDataConfig.{name}"
    if not isinstance(value, Mapping):
        return Channel(name, _local_path(value, where))
    unknown = set(value) - {"path", "distribution"}
    if unknown or "path" not in value:
        raise RequestError(where, f"{dict(value)!r} is not a channel",
                           allowed='a folder, or {"path": folder, "distribution": "ShardedByS3Key"}')
    return Channel(name, _local_path(value["path"], where),
                   s3_distribution_type=value.get("distribution", "FullyReplicated"))


def _names(value: Any, field_name: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise RequestError(field_name, f"must be a list of variable names, got {value!r}",
                           allowed='e.g. ["HF_TOKEN", "WANDB_API_KEY"]')
    return tuple(value)


def container_command_field(value: Any, field_name: str) -> tuple[str, ...] | None:
    """Check ``ContainerEntrypoint``/``ContainerArguments`` as CreateTrainingJob does and return it
    as a tuple (None when absent). A bare string is refused: the API takes a list of strings."""
    if value is None:
        return None
    low, high = CONTAINER_COMMAND_ITEMS
    allowed = (f"a list of {low}-{high} strings of at most {CONTAINER_COMMAND_ITEM_LENGTH} characters, "
               'e.g. ["/bin/bash", "-c", "python train.py"]')
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise RequestError(field_name, f"must be a list of strings, got {type(value).__name__} {value!r}",
                           allowed=allowed)
    if not low <= len(value) <= high:
        raise RequestError(field_name, f"has {len(value)} item(s)", allowed=allowed)
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise RequestError(f"{field_name}[{i}]", f"{item!r} is a {type(item).__name__}, not a string",
                               allowed=allowed)
        if len(item) > CONTAINER_COMMAND_ITEM_LENGTH:
            raise RequestError(f"{field_name}[{i}]", f"{len(item)} characters long", allowed=allowed)
    return tuple(value)


def container_command(entrypoint: Any, arguments: Any) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """Check ``AlgorithmSpecification.ContainerEntrypoint``/``ContainerArguments`` together; return
    them as tuples (None when absent)."""
    entry = container_command_field(entrypoint, "AlgorithmSpecification.ContainerEntrypoint")
    args = container_command_field(arguments, "AlgorithmSpecification.ContainerArguments")
    if args is not None and entry is None:
        raise RequestError("AlgorithmSpecification.ContainerArguments", "given without ContainerEntrypoint; "
                           "the emulator runs the toolkit's train, which takes no arguments",
                           allowed="ContainerEntrypoint with it, or neither")
    return entry, args


def _check_count(count: Any, field_name: str) -> None:
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_HOSTS:
        raise RequestError(field_name, f"must be a whole number of hosts from 1 to {MAX_HOSTS}, got {count!r}",
                           allowed=f"1..{MAX_HOSTS} (every host runs on this machine)")


def _validate_groups(groups: Sequence[InstanceGroup]) -> InstanceType:
    if not groups:
        raise RequestError("ResourceConfig.InstanceGroups", "is empty", allowed="at least one group")
    seen: set[str] = set()
    for i, g in enumerate(groups):
        where = f"ResourceConfig.InstanceGroups[{i}]"
        if not g.name or g.name in seen:
            raise RequestError(f"{where}.InstanceGroupName", f"missing or repeated name {g.name!r}")
        seen.add(g.name)
        _check_count(g.count, f"{where}.InstanceCount" if len(groups) > 1 else "ResourceConfig.InstanceCount")
        lookup(g.instance_type, field=f"{where}.InstanceType" if len(groups) > 1 else "ResourceConfig.InstanceType")
    total = sum(g.count for g in groups)
    if total > MAX_HOSTS:
        raise RequestError("ResourceConfig", f"{total} hosts in all; the emulator runs at most {MAX_HOSTS}")
    return lookup(groups[0].instance_type)


def _validate_entry_point(entry: str, source_dir: Path) -> None:
    if not entry or entry.startswith("-"):
        raise RequestError("entry_point", f"{entry!r} is not a file name")
    ep = (source_dir / entry)
    try:
        ep.resolve().relative_to(source_dir.resolve())
    except ValueError:
        raise RequestError("entry_point", f"{entry!r} is outside the source dir {source_dir}",
                           allowed="a path relative to source_dir, inside it") from None
    if not ep.is_file():  # the SDK's text (sagemaker.fw_utils.validate_source_dir)
        raise RequestError("entry_point", f'No file named "{entry}" was found in directory "{source_dir}".')


def no_objects_message(uri: str, *, region: str, role: str | None) -> str:
    """SageMaker's CreateTrainingJob ``ValidationException`` text for a channel whose S3 prefix
    lists no objects, as real jobs report it (e.g. ``No S3 objects found under S3 URL
    "s3://kedro-data" given in input data source. Please ensure that the bucket exists in the
    selected region (us-east-1), that objects exist under that S3 prefix, and that the role
    "arn:aws:iam::…:role/SageMaker-ExecRole" has "s3:ListBucket" permissions on bucket
    "kedro-data".``; hashicorp/terraform-provider-aws ``internal/service/sagemaker`` retries
    CreateHyperParameterTuningJob on that ``ValidationException`` text)."""
    text = f'No S3 objects found under S3 URL "{uri}" given in input data source.'
    bucket = urlparse(uri).netloc if uri.startswith("s3://") else ""
    if not bucket:
        return text
    return (f"{text} Please ensure that the bucket exists in the selected region ({region}), that objects "
            f'exist under that S3 prefix, and that the role "{role or "<RoleArn>"}" has "s3:ListBucket" '
            f'permissions on bucket "{bucket}".')


def _has_files(folder: Path) -> bool:
    return any(p.is_file() for p in folder.rglob("*"))


def _validate_gpu_memory(request: JobRequest) -> None:
    """``gpu_memory`` is ``count`` or ``off``; ``gpu_memory_gib`` is positive and at most the GPU
    memory of every GPU instance type of the job (an override can only make a GPU smaller)."""
    if request.gpu_memory not in GPU_MEMORY_MODES:
        raise RequestError("gpu_memory", f"{request.gpu_memory!r}", allowed=" or ".join(GPU_MEMORY_MODES))
    gib = request.gpu_memory_gib
    if gib is None:
        return
    gpu_types = [g.type for g in request.instance_groups if g.type.is_gpu]
    if not gpu_types:
        raise RequestError("gpu_memory_gib", f"{gib!r} GiB, but {request.instance_groups[0].type.name} has no GPUs",
                           allowed="omit it for CPU types")
    smallest = min(gpu_types, key=lambda t: t.gpu_memory)
    most = smallest.gpu_memory / (1 << 30)
    if not isinstance(gib, int | float) or isinstance(gib, bool) or not 0 < gib <= most:
        raise RequestError("gpu_memory_gib", f"{gib!r} GiB per GPU on {smallest.name} ({smallest.gpu_model}, "
                           f"{most:.2f} GiB as CUDA reports it)", allowed=f"a number of GiB > 0 and <= {most:.2f}")


def validate(request: JobRequest) -> None:
    """Check a request; raise :class:`RequestError` naming the first bad field. Reads only."""
    if not isinstance(request.job_name, str) or not JOB_NAME_RE.match(request.job_name):
        raise RequestError("TrainingJobName", f"{request.job_name!r} is not a valid training job name",
                           allowed="1-63 ASCII letters, digits and hyphens, no leading or trailing hyphen")
    _validate_groups(request.instance_groups)
    for i, g in enumerate(request.instance_groups):  # after the SDK's own Trainium checks (create)
        if g.type.is_trainium:
            refuse_neuron(g.instance_type, field=f"ResourceConfig.InstanceGroups[{i}].InstanceType"
                          if len(request.instance_groups) > 1 else "ResourceConfig.InstanceType")
    if request.gpus_per_host is not None:
        gpus = request.gpus_per_host
        for g in request.instance_groups:
            itype = g.type
            if not itype.is_gpu:
                raise RequestError("gpus_per_host", f"{itype.name} has no GPUs; the override can only "
                                   "scale a GPU instance type's count down", allowed="omit it for CPU types")
            if not isinstance(gpus, int) or isinstance(gpus, bool) or not 1 <= gpus <= itype.gpus:
                raise RequestError("gpus_per_host", f"{gpus!r} GPUs per host on {itype.name}",
                                   allowed=f"1..{itype.gpus}")
    _validate_gpu_memory(request)
    container_command(request.container_entrypoint, request.container_arguments)
    if not request.source_dir.is_dir():
        raise RequestError("source_dir", f"{request.source_dir} is not an existing folder")
    entry = request.entry_point
    # With a container entrypoint (SDK v3) there may be no entry point: the code is a channel.
    if entry or request.container_entrypoint is None:
        _validate_entry_point(entry, request.source_dir)
    hps = request.hyperparameters
    if not isinstance(hps, Mapping):
        raise RequestError("HyperParameters", "must be a JSON object of strings")
    for k, v in hps.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise RequestError(f"HyperParameters.{k}", f"value {v!r} is not a string",
                               allowed="JSON-encoded strings, as the SDK sends them")
        if len(k) > 256 or len(v) > 2500:
            raise RequestError(f"HyperParameters.{k}", "longer than SageMaker allows",
                               allowed="keys up to 256 and values up to 2500 characters")
    if len(hps) > 100:
        raise RequestError("HyperParameters", f"{len(hps)} entries; SageMaker allows at most 100")
    seen: set[str] = set()
    for ch in request.channels:
        if not CHANNEL_NAME_RE.match(ch.name) or len(ch.name) > 64:
            raise RequestError(f"InputDataConfig.{ch.name}", "invalid channel name",
                               allowed="1-64 of letters, digits, '.', '-', '_'")
        if ch.name in seen:
            raise RequestError(f"InputDataConfig.{ch.name}", "channel given twice")
        seen.add(ch.name)
        if not ch.path.is_dir():
            raise RequestError(f"InputDataConfig.{ch.name}", f"{ch.path} is not an existing folder")
        if not _has_files(ch.path):  # the folder stands for an S3 prefix with no objects under it
            raise RequestError(f"InputDataConfig.{ch.name}",
                               no_objects_message(ch.path.as_uri(), region=request.region, role=None)
                               + f" ({ch.path} stands for the channel's S3 prefix and has no files)",
                               allowed="a folder with at least one file: SageMaker refuses a channel whose "
                               "S3 prefix lists no objects at CreateTrainingJob")
        if ch.s3_distribution_type not in ("FullyReplicated", "ShardedByS3Key"):
            raise RequestError(f"InputDataConfig.{ch.name}.S3DataDistributionType",
                               f"{ch.s3_distribution_type!r} is not a distribution type",
                               allowed="FullyReplicated or ShardedByS3Key")
    if request.output_path.exists() and not request.output_path.is_dir():
        raise RequestError("OutputDataConfig.S3OutputPath", f"{request.output_path} exists and is not a folder")
    if (request.job_dir / "job.json").exists() or (request.job_dir / "logs").exists():
        raise RequestError("TrainingJobName", f"a job named {request.job_name!r} already has results in "
                           f"{request.job_dir}", allowed="a new job name (names are unique per account and region)")
    mr = request.max_runtime_seconds
    if not isinstance(mr, int) or isinstance(mr, bool) or not 1 <= mr <= MAX_RUNTIME_LIMIT:
        raise RequestError("StoppingCondition.MaxRuntimeInSeconds", f"{mr!r} is out of range",
                           allowed=f"1..{MAX_RUNTIME_LIMIT} seconds (28 days)")
    local = request.checkpoint_local_path
    if not isinstance(local, str) or not local.startswith("/") or ".." in local.split("/"):
        raise RequestError("CheckpointConfig.LocalPath", f"{local!r} is not an absolute path",
                           allowed="an absolute path without '..', e.g. /opt/ml/checkpoints")
    if request.checkpoint_dir is not None and request.checkpoint_dir.exists() and not request.checkpoint_dir.is_dir():
        raise RequestError("CheckpointConfig.S3Uri", f"{request.checkpoint_dir} exists and is not a folder")
    for k, v in request.environment.items():
        if not isinstance(k, str) or not ENV_NAME_RE.match(k):
            raise RequestError(f"Environment.{k}", "invalid variable name", allowed="[a-zA-Z_][a-zA-Z0-9_]*")
        if not isinstance(v, str):
            raise RequestError(f"Environment.{k}", f"value {v!r} is not a string")
    for name in request.pass_env:
        if not isinstance(name, str) or not ENV_NAME_RE.match(name):
            raise RequestError("pass_env", f"{name!r} is not a variable name", allowed="[a-zA-Z_][a-zA-Z0-9_]*")
        if name in CREDENTIAL_VARIABLES or name.startswith(P.ENV_PREFIX):
            raise RequestError("pass_env", f"{name} cannot be passed by name",
                               allowed="AWS credentials only with forward_aws_credentials "
                               "(--forward-aws-credentials); EMULATOR_* variables are the emulator's own")
    if request.host_order is not None:
        order, hosts = list(request.host_order), request.hosts
        extra = [h for h in order if h not in hosts]
        missing = [h for h in hosts if h not in order]
        if extra or missing or len(order) != len(hosts):
            what = (f"{extra[0]!r} is not a host of this job" if extra else
                    f"{missing[0]} is missing" if missing else "a host is listed twice")
            raise RequestError("host_order", f"{what} (got {order!r})", allowed=_host_order_allowed(hosts))
    if not isinstance(request.smddp_strict, bool):
        raise RequestError("smddp_strict", f"must be true or false, got {request.smddp_strict!r}",
                           allowed="true or false")
    if request.smddp_strict and not any(request.has_smddp(g.type) for g in request.instance_groups):
        names = ", ".join(dict.fromkeys(g.instance_type for g in request.instance_groups))
        raise RequestError("smddp_strict", f"{names} has no SMDDP ({request.dlc_image.label} does not ship "
                           "smdistributed), so there is nothing to be strict about",
                           allowed="a GPU instance type (ml.g*, ml.p*) of a DLC with SMDDP (PyTorch 2.5 and older), "
                                   "or leave smddp_strict off")
    if not isinstance(request.wait_on_rendezvous_errors, bool):
        raise RequestError("wait_on_rendezvous_errors",
                           f"must be true or false, got {request.wait_on_rendezvous_errors!r}",
                           allowed="true (leave the job waiting, as SageMaker) or false (stop it as Failed)")
    if len(request.environment) > 100:
        raise RequestError("Environment", "more than 100 entries; SageMaker allows at most 100")
    profiles.get(request.profile)
    if not re.match(r"^[a-z]{2}(-[a-z]+)+-\d$", request.region):
        raise RequestError("region", f"{request.region!r} is not an AWS region name", allowed="e.g. us-west-2")
    for value, field_name in ((request.framework_version, frameworks.FIELD_VERSION),
                              (request.py_version, frameworks.FIELD_PY)):
        if value is not None and not isinstance(value, str):
            raise RequestError(field_name, f"{value!r} is a {type(value).__name__}, not a string",
                               allowed='a version string, e.g. "1.12.1" / "py38"')
    # an unknown version, a py_version that version never had, a DLC without a wheel here
    frameworks.select(request.framework_version, request.py_version, image_uri=request.image_uri)
    program = dist.decode(hps.get("sagemaker_program", json.dumps(entry)))
    if program != entry:
        raise RequestError("HyperParameters.sagemaker_program", f"{program!r} differs from entry_point {entry!r}")
