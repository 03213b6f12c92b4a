"""CreateTrainingJob request (as the SageMaker SDK builds it) → :class:`~emulator.job.request.JobRequest`.

Both SDK majors' requests are taken: v2 estimators send ``sagemaker_*`` hyperparameters and a
``sourcedir.tar.gz``; v3's ``ModelTrainer`` sends ``AlgorithmSpecification.ContainerEntrypoint``/
``ContainerArguments``, plain-string hyperparameters and its code as two channels of loose files
(``code``, ``sm_drivers``). A request with a ``ContainerEntrypoint`` and no ``sagemaker_program``
has no entry point: the hosts run the container command, ``/opt/ml/code`` stays empty (as on
SageMaker), and the ``code``/``sm_drivers`` channels are copied into each host (writable: v3's
``sm_train.sh`` runs ``chmod +x`` there). ``SourceCode.requirements`` (read from
``sm_drivers/sourcecode.json``) becomes the request's ``requirements_file``, from which the job
environment is prepared.

What is carried over exactly: the job name, the hyperparameters (every key as sent, including
``sagemaker_*``; ``sagemaker_submit_directory`` keeps its ``s3://`` value — the toolkit finds the
code already in ``/opt/ml/code`` and never fetches it), the resource config (type and count, or
instance groups), the channels (``S3DataSource`` and ``FileDataSource``), the output path, the
stopping condition, the checkpoint config, the environment and the training image (recorded).

``s3://`` locations are mapped to the local S3 folder of :class:`~emulator.sdk.s3.S3Store`;
``file://`` locations are used in place. An ``S3Prefix`` channel holds what ``ListObjectsV2`` lists
for the prefix (keys matched by prefix, as S3 does); a prefix that lists nothing is refused with
SageMaker's ``ValidationException`` text ("No S3 objects found under S3 URL …").
Refused with a :class:`~emulator.errors.RequestError`:
channels that are neither (``FileSystemDataSource``), ``Pipe``/``FastFile`` input modes' semantics
(accepted, run as ``File``), a ``ContainerEntrypoint``/``ContainerArguments`` that is not a list of
strings, and a request with neither ``sagemaker_program`` nor ``ContainerEntrypoint``.

Ignored (accepted, not emulated): ``RoleArn``, ``VpcConfig``, ``EnableNetworkIsolation``,
``EnableInterContainerTrafficEncryption``, managed spot (``EnableManagedSpotTraining``,
``MaxWaitTimeInSeconds``), ``RetryStrategy``, Debugger/Profiler/TensorBoard configs, ``Tags``,
``ExperimentConfig``, ``OutputDataConfig.KmsKeyId`` and ``CompressionType``.
``AlgorithmSpecification.MetricDefinitions`` are read from the hosts' logs
(:mod:`emulator.job.metrics`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ..errors import RequestError
from ..inhost import protocol as P
from ..job import distribution as dist
from ..job.archives import safe_extract
from ..job.request import (
    Channel,
    JobRequest,
    container_command,
    from_wire,
    no_objects_message,
    validate,
)
from .s3 import S3Store, channel_name, split_s3


@dataclass
class Translated:
    """The request to run, plus what the session needs to report in S3 terms afterwards."""

    request: JobRequest
    create_request: dict[str, Any]
    output_uri: str
    checkpoint_uri: str | None = None
    temp_dirs: list[Path] = field(default_factory=list)


def _where(uri: str, field_name: str, store: S3Store | None) -> Path:
    """A local path for an ``s3://`` (via the store) or ``file://`` URI."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(parsed.path)
    if parsed.scheme == "s3":
        if store is None:
            raise RequestError(field_name, f"{uri!r}: s3:// needs the emulator's S3 store")
        return store.save(uri)
    if not parsed.scheme and uri.startswith("/"):
        return Path(uri)
    raise RequestError(field_name, f"unsupported location {uri!r}", allowed="s3:// or file:// URIs")


def _source(hps: Mapping[str, str], store: S3Store | None, temp: list[Path]) -> tuple[Path, str]:
    if "sagemaker_program" not in hps:
        raise RequestError("HyperParameters.sagemaker_program", "missing, and there is no "
                           "AlgorithmSpecification.ContainerEntrypoint to run instead",
                           allowed="an SDK v2 estimator with entry_point=, or SDK v3's ModelTrainer")
    entry = str(dist.decode(hps["sagemaker_program"]))
    submit = hps.get("sagemaker_submit_directory")
    if submit is None:
        raise RequestError("HyperParameters.sagemaker_submit_directory", "missing")
    location = str(dist.decode(submit))
    local = _where(location, "HyperParameters.sagemaker_submit_directory", store)
    if local.is_dir():
        return local, entry
    if not local.is_file():
        raise RequestError("HyperParameters.sagemaker_submit_directory", f"{location} does not exist")
    code = Path(tempfile.mkdtemp(prefix="sm-emulator-sourcedir-"))
    temp.append(code)
    safe_extract(local, code)
    return code, entry


#: SDK v3's own channels (``sagemaker.train.constants``): the source dir and the driver scripts.
V3_CODE_CHANNEL = "code"
V3_DRIVERS_CHANNEL = "sm_drivers"
#: The file in ``sm_drivers`` that carries ``SourceCode`` (``requirements`` among its keys).
V3_SOURCE_CODE_JSON = "sourcecode.json"


def _s3_channel(uri: str, name: str, store: S3Store, temp: list[Path], *, region: str,
                role: str | None) -> Path:
    """The folder holding what ``ListObjectsV2`` lists under the prefix ``uri`` (file names per
    :func:`~emulator.sdk.s3.channel_name`). Refused, as CreateTrainingJob refuses it, when the
    prefix lists no object."""
    keys = store.list_keys(uri)
    if not keys:
        raise RequestError(f"InputDataConfig.{name}", no_objects_message(uri, region=region, role=role),
                           allowed="an S3 prefix with at least one object under it")
    bucket, prefix = split_s3(uri)
    store.save(uri)  # every listed object reaches the S3 mirror folder
    below = prefix if not prefix or prefix.endswith("/") else prefix + "/"
    if all(k.startswith(below) for k in keys):  # a "folder": mounted from the S3 mirror as it is
        return store.local_path(f"s3://{bucket}/{below}")
    # a partial-key prefix or one object: the channel holds copies (a symlink would point at a
    # path only this machine has; a container could not follow it)
    folder = Path(tempfile.mkdtemp(prefix=f"sm-emulator-channel-{name}-"))
    temp.append(folder)
    for key in keys:
        target = folder / channel_name(prefix, key)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(store.local_path(f"s3://{bucket}/{key}"), target)
    return folder


def _channel(spec: Mapping[str, Any], store: S3Store | None, temp: list[Path],
             copy: bool = False, *, region: str = P.DEFAULT_REGION, role: str | None = None) -> Channel:
    name = spec.get("ChannelName", "")
    where = f"InputDataConfig.{name}"
    source = spec.get("DataSource", {})
    dist_type = "FullyReplicated"
    if "S3DataSource" in source:
        s3 = source["S3DataSource"]
        uri = s3["S3Uri"]
        dist_type = s3.get("S3DataDistributionType", "FullyReplicated")
        if s3.get("S3DataType", "S3Prefix") != "S3Prefix":
            raise RequestError(f"{where}.S3DataType", f"{s3['S3DataType']!r} is not emulated",
                               allowed="S3Prefix")
        if urlparse(uri).scheme == "s3" and store is not None:
            path = _s3_channel(uri, name, store, temp, region=region, role=role)
        else:  # file:// (SDK local mode's spelling): the folder as it is
            path = _where(uri, where, store)
            if path.is_file():
                folder = Path(tempfile.mkdtemp(prefix=f"sm-emulator-channel-{name}-"))
                temp.append(folder)
                shutil.copy2(path, folder / path.name)
                path = folder
    elif "FileDataSource" in source:
        path = _where(source["FileDataSource"]["FileUri"], where, store)
    else:
        raise RequestError(f"{where}.DataSource", f"{sorted(source)} is not emulated",
                           allowed="S3DataSource or FileDataSource")
    if dist_type not in ("FullyReplicated", "ShardedByS3Key"):
        raise RequestError(f"{where}.S3DataDistributionType", f"{dist_type!r} is not a distribution type",
                           allowed="FullyReplicated or ShardedByS3Key")
    return Channel(name=name, path=path, content_type=spec.get("ContentType"),
                   s3_distribution_type=dist_type, copy=copy)  # type: ignore[arg-type]


def _v3_requirements(channels: tuple[Channel, ...]) -> Path | None:
    """``SourceCode.requirements`` as a file in the ``code`` channel, if the job installs one."""
    found = {c.name: c.path for c in channels}
    if V3_CODE_CHANNEL not in found or V3_DRIVERS_CHANNEL not in found:
        return None
    try:
        source_code = json.loads((found[V3_DRIVERS_CHANNEL] / V3_SOURCE_CODE_JSON).read_text())
    except (OSError, ValueError):
        return None
    name = source_code.get("requirements") if isinstance(source_code, dict) else None
    if not isinstance(name, str) or not name:
        return None
    path = found[V3_CODE_CHANNEL] / name
    return path if path.is_file() else None  # a missing file fails in the host, as on SageMaker


def _validate(request: JobRequest) -> None:
    """``validate``, except that files the SDK itself put under ``<output>/<job>/`` before the job
    (``source/sourcedir.tar.gz``, ``debug-output``, ``profiler-output``) are not "results"."""
    if (request.job_dir / "job.json").exists():
        raise RequestError("TrainingJobName", f"a job named {request.job_name!r} already exists "
                           f"({request.job_dir / 'job.json'})", allowed="a new job name")
    if request.job_dir.is_dir():
        with tempfile.TemporaryDirectory(prefix="sm-emulator-validate-") as empty:
            validate(replace(request, output_path=Path(empty)))
    else:
        validate(request)


def from_create_training_job(create: Mapping[str, Any], *, store: S3Store | None = None,
                             region: str = P.DEFAULT_REGION, gpus_per_host: int | None = None,
                             forward_aws_credentials: bool = False,
                             framework_version: str | None = None) -> Translated:
    """Translate a CreateTrainingJob request dict and validate the result. The torch and Python
    follow the PyTorch DLC ``TrainingImage`` (see :mod:`emulator.job.frameworks`) unless
    ``framework_version`` overrides it (``"current"``: today's torch)."""
    temp: list[Path] = []
    try:
        return _translate(create, store=store, region=region, gpus_per_host=gpus_per_host,
                          forward_aws_credentials=forward_aws_credentials, temp=temp,
                          framework_version=framework_version)
    except BaseException:  # refused: leave nothing behind
        for d in temp:
            shutil.rmtree(d, ignore_errors=True)
        raise


def _translate(create: Mapping[str, Any], *, store: S3Store | None, region: str, gpus_per_host: int | None,
               forward_aws_credentials: bool, temp: list[Path], framework_version: str | None = None) -> Translated:
    algo = create.get("AlgorithmSpecification") or {}
    entrypoint, _ = container_command(algo.get("ContainerEntrypoint"), algo.get("ContainerArguments"))
    hps = dict(create.get("HyperParameters") or {})
    v3 = entrypoint is not None and "sagemaker_program" not in hps
    if v3:  # no source dir: the code arrives as the `code` channel; /opt/ml/code stays empty
        source, entry = Path(tempfile.mkdtemp(prefix="sm-emulator-nocode-")), ""
        temp.append(source)
    else:
        source, entry = _source(hps, store, temp)
    output_uri = (create.get("OutputDataConfig") or {}).get("S3OutputPath", "")
    output = _where(output_uri, "OutputDataConfig.S3OutputPath", store)
    if urlparse(output_uri).scheme == "s3" and store is not None:
        output = store.local_path(output_uri)
    ckpt = create.get("CheckpointConfig") or {}
    ckpt_uri = ckpt.get("S3Uri")
    ckpt_dir = _where(ckpt_uri, "CheckpointConfig.S3Uri", store) if ckpt_uri else None
    channels = tuple(_channel(c, store, temp, copy=v3 and c.get("ChannelName") in (V3_CODE_CHANNEL, V3_DRIVERS_CHANNEL),
                              region=region, role=create.get("RoleArn"))
                     for c in create.get("InputDataConfig") or [])
    request = from_wire(
        {**create, "HyperParameters": hps},
        entry_point=entry,
        source_dir=source,
        output_path=output,
        channels=channels,
        checkpoint_dir=ckpt_dir,
        region=region,
        gpus_per_host=gpus_per_host,
        forward_aws_credentials=forward_aws_credentials,
        requirements_file=_v3_requirements(channels) if v3 else None,
        framework_version=framework_version,
    )
    _validate(request)
    return Translated(request=request, create_request=dict(create), output_uri=output_uri,
                      checkpoint_uri=ckpt_uri, temp_dirs=temp)
