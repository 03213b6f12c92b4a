"""A recorded DescribeTrainingJob document → the CreateTrainingJob request a replay runs.

The document's request fields (those DescribeTrainingJob echoes, :data:`emulator.sdk.client.ECHOED`)
become a CreateTrainingJob request, which goes through the SDK session's own translator
(:func:`emulator.sdk.translate.from_create_training_job`), so a replay runs what an SDK launch of
that request runs. Only locations change: the code (``sagemaker_submit_directory``, v2) comes from
``--source-dir``, each channel's ``S3Uri`` from a ``--channel`` folder, the output and checkpoint
``S3Uri`` from folders under the output dir. The hyperparameters reach the hosts byte for byte as
recorded (``sagemaker_submit_directory`` and ``sagemaker_job_name`` keep the recorded job's
values, as the SDK session keeps them: the toolkit finds the code in ``/opt/ml/code``).

Refused, before anything is written (:class:`~emulator.errors.RequestError` naming the field): a
document without ``AlgorithmSpecification``/``ResourceConfig``, an ``AlgorithmName`` (built-in
and Marketplace algorithms), an image that is no PyTorch or Hugging Face DLC, a missing or
unreadable code archive, channels without a folder (all of them in one message), ``--hosts`` on a
job with instance groups, and whatever the translator and the request validation refuse.

Not replayed (reported): :data:`NOT_REPLAYED`. Response-only fields (statuses, times, ARNs,
``ModelArtifacts``, metrics, the emulator's ``Emulator`` object …) are dropped.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import tarfile
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ..errors import RequestError
from ..inhost import protocol as P
from ..job import distribution as dist
from ..job import frameworks, profiles
from ..job.request import JobRequest
from ..sdk.client import ECHOED
from ..sdk.translate import V3_CODE_CHANNEL, V3_DRIVERS_CHANNEL, Translated, from_create_training_job

#: Echoed request fields a replay leaves out, and why: what they configure is not emulated.
NOT_REPLAYED = {
    "VpcConfig": "the hosts run on the emulator's private network, not in the job's VPC",
    "DebugHookConfig": "SageMaker Debugger's hook (smdebug is not installed)",
    "DebugRuleConfigurations": "Debugger rules run as separate processing jobs",
    "ProfilerConfig": "SageMaker Profiler is not emulated",
    "ProfilerRuleConfigurations": "profiler rules run as separate processing jobs",
    "TensorBoardOutputConfig": "TensorBoard output is not uploaded",
    "ExperimentConfig": "SageMaker Experiments are not emulated",
    "RemoteDebugConfig": "remote debugging is not emulated",
    "InfraCheckConfig": "instance health checks are not emulated",
}
#: Carried as recorded; the translator accepts them and their effect is not emulated.
ACCEPTED_NOT_EMULATED = ("RoleArn", "EnableNetworkIsolation", "EnableInterContainerTrafficEncryption",
                         "EnableManagedSpotTraining", "RetryStrategy")
#: What the emulator's own ``job.json`` records as ``TrainingImage`` when the request named none
#: (the process backend's placeholder, the docker backend's images).
EMULATOR_IMAGES = re.compile(r"^(?:emulator:process|sagemaker-emulator:[\w.-]+)$")
#: :mod:`emulator.job.deviations`' sentence for a GPU scale-down, in an emulator ``job.json``.
GPU_DEVIATION = re.compile(r"GPUs scaled down: (\d+) of \d+ GPUs per host")
ARN_REGION = re.compile(r"^arn:aws[a-z-]*:sagemaker:([a-z0-9-]+):")
MAX_NAME = 63
SOURCE_ALLOWED = "a folder, or a sourcedir.tar.gz as the SDK uploads it"
#: ``fetch_code(s3_uri, temp) -> local file``: downloads the recorded code (by-name sources).
FetchCode = Callable[[str, list[Path]], Path]
#: ``fetch_prefix(s3_uri, limit, temp) -> (folder, objects downloaded)``: downloads the first
#: ``limit`` objects (None: all) under an S3 prefix into a new temp folder (added to ``temp``).
FetchPrefix = Callable[[str, int | None, list[Path]], tuple[Path, int]]
#: The most objects a v3 ``code`` or ``sm_drivers`` channel is downloaded with (the SDK uploads a
#: source dir and its driver scripts there; more objects than this is not a code folder).
CODE_CHANNEL_MAX = 2000


@dataclass(frozen=True)
class Options:
    """Where a replay finds what the document names only by S3 URI, and what it scales."""

    source_dir: Path | None = None
    channels: Mapping[str, Path] = field(default_factory=dict)
    hosts: int | None = None
    gpus_per_host: int | None = None
    output_dir: Path = Path("replay-out")
    #: None: the profile an emulator ``job.json`` records (``Emulator.Profile``), else ``exact``.
    profile: str | None = None
    #: Download the first N objects under each channel's S3 prefix that has no folder (needs
    #: AWS credentials: a ``fetch_prefix``).
    sample: int | None = None
    framework_version: str | None = None
    job_name: str | None = None


@dataclass(frozen=True)
class Located:
    """One recorded location and the local path that stands for it (``how``: which flag, or as recorded)."""

    name: str
    recorded: str | None
    local: Path
    how: str


@dataclass
class Replay:
    """A replay ready to run: the request, the facts the report prints, and its temp folders."""

    document: dict[str, Any]
    create: dict[str, Any]
    translated: Translated
    code: Located | None
    channels: list[Located]
    scaled: list[str]
    not_replayed: list[tuple[str, str]]
    dropped: list[str]
    temp_dirs: list[Path]
    #: Where the profile came from: ``--profile``, ``Emulator.Profile in job.json`` or ``default``.
    profile_from: str = "default"

    @property
    def request(self) -> JobRequest:
        return self.translated.request

    @property
    def recorded_name(self) -> str:
        return str(self.document.get("TrainingJobName") or "")

    def cleanup(self) -> None:
        for folder in self.temp_dirs:
            shutil.rmtree(folder, ignore_errors=True)


def replay_name(recorded: str, now: float | None = None) -> str:
    """``<recorded, truncated>-replay-<MMDDhhmmss><ms>``: a new, valid job name of at most 63 characters."""
    now = time.time() if now is None else now
    suffix = f"-replay-{time.strftime('%m%d%H%M%S', time.gmtime(now))}{int(now * 1000) % 1000:03d}"
    base = re.sub(r"[^a-zA-Z0-9-]+", "-", recorded)[: MAX_NAME - len(suffix)].strip("-")
    return (base or "job") + suffix


def check_document(document: Any) -> dict[str, Any]:
    """The document, if it is a DescribeTrainingJob's; else a :class:`RequestError` naming the field."""
    allowed = ("the output of `aws sagemaker describe-training-job --training-job-name NAME`, "
               "or the job.json the emulator writes into a job folder")
    if not isinstance(document, dict):
        raise RequestError("SOURCE", f"is a JSON {type(document).__name__}, not a DescribeTrainingJob object",
                           allowed=allowed)
    for key in ("AlgorithmSpecification", "ResourceConfig"):
        if not isinstance(document.get(key), dict):
            raise RequestError(key, "missing: SOURCE is not a DescribeTrainingJob document", allowed=allowed)
    if not isinstance(document.get("TrainingJobStatus"), str):  # the outcome a replay is judged against
        raise RequestError("TrainingJobStatus", "missing: SOURCE is not a DescribeTrainingJob document (the "
                           "service model requires it, and the replay compares its own status with it)",
                           allowed=allowed)
    return document


def recorded_profile(doc: Mapping[str, Any]) -> str | None:
    """The profile an emulator ``job.json`` records (``Emulator.Profile``), else None."""
    emulator = doc.get("Emulator")
    profile = emulator.get("Profile") if isinstance(emulator, dict) else None
    return profile if isinstance(profile, str) and profile else None


def build(document: Any, options: Options, *, fetch_code: FetchCode | None = None,
          fetch_prefix: FetchPrefix | None = None) -> Replay:
    """Map ``document`` with ``options`` and translate it; every refusal leaves nothing behind.
    The caller runs :meth:`Replay.cleanup` when done."""
    doc = check_document(document)
    profile = _profile(doc, options.profile)
    if options.sample is not None and options.sample < 1:
        raise RequestError("--sample", f"{options.sample}: not a positive number of objects", allowed="N >= 1")
    temp: list[Path] = []
    try:
        return _build(doc, options, profile, fetch_code, fetch_prefix, temp)
    except BaseException:
        for folder in temp:
            shutil.rmtree(folder, ignore_errors=True)
        raise


def _profile(doc: Mapping[str, Any], given: str | None) -> tuple[str, str]:
    """The replay's profile, checked, and where it came from: ``--profile``, the one an emulator
    ``job.json`` records, else ``exact``."""
    if given is not None:
        return profiles.get(given, field="--profile").name, "--profile"
    if (recorded := recorded_profile(doc)) is not None:
        return profiles.get(recorded, field="Emulator.Profile").name, "Emulator.Profile in job.json"
    return profiles.EXACT, "default"


def _build(doc: dict[str, Any], options: Options, profile_and_source: tuple[str, str], fetch_code: FetchCode | None,
           fetch_prefix: FetchPrefix | None, temp: list[Path]) -> Replay:
    image, framework_version, py_version = training_image(doc, options.framework_version)
    create = {k: copy.deepcopy(doc[k]) for k in ECHOED if k in doc and k not in NOT_REPLAYED}
    create["TrainingJobName"] = options.job_name or replay_name(str(doc.get("TrainingJobName") or "job"))
    algo = dict(create["AlgorithmSpecification"])
    algo.pop("TrainingImage", None)
    create["AlgorithmSpecification"] = {**({"TrainingImage": image} if image else {}), **algo}
    recorded_hps = dict(doc.get("HyperParameters") or {})
    v3 = algo.get("ContainerEntrypoint") is not None and "sagemaker_program" not in recorded_hps
    code = _code(recorded_hps, v3, options.source_dir, fetch_code, temp)
    if code is not None:
        create["HyperParameters"] = {**recorded_hps, "sagemaker_submit_directory": json.dumps(code.local.as_uri())}
    create["InputDataConfig"], channels = _channels(doc.get("InputDataConfig") or [], options.channels,
                                                    sample=options.sample, fetch_prefix=fetch_prefix, temp=temp)
    create["ResourceConfig"], scaled = _resources(doc["ResourceConfig"], options.hosts)
    output = options.output_dir.expanduser().absolute()
    create["OutputDataConfig"] = {**(doc.get("OutputDataConfig") or {}), "S3OutputPath": output.as_uri()}
    checkpoint = dict(doc.get("CheckpointConfig") or {})
    if checkpoint.get("S3Uri"):
        checkpoint["S3Uri"] = (output / "checkpoints" / create["TrainingJobName"]).as_uri()
        create["CheckpointConfig"] = checkpoint
    translated = from_create_training_job(create, region=region_of(doc), framework_version=framework_version,
                                          gpus_per_host=options.gpus_per_host or recorded_gpus(doc))
    temp += translated.temp_dirs
    profile, profile_from = profile_and_source
    translated.request = replace(translated.request, hyperparameters=recorded_hps, profile=profile,
                                 py_version=py_version)
    if py_version is not None:
        frameworks.select(framework_version, py_version)  # a py_version that version never had: refused
    return Replay(document=doc, create=create, translated=translated, code=code, channels=channels,
                  scaled=scaled, not_replayed=[(k, why) for k, why in NOT_REPLAYED.items() if doc.get(k)],
                  dropped=sorted(k for k in doc if k not in ECHOED), temp_dirs=temp, profile_from=profile_from)


def _recorded_framework(doc: Mapping[str, Any]) -> dict[str, Any]:
    emulator = doc.get("Emulator")
    framework = emulator.get("Framework") if isinstance(emulator, dict) else None
    return framework if isinstance(framework, dict) else {}


def training_image(doc: Mapping[str, Any],
                   framework_version: str | None) -> tuple[str | None, str | None, str | None]:
    """The ``TrainingImage`` to send (None: none named), and the framework and Python versions to
    run (``framework_version``, the caller's override, wins).

    An emulator ``job.json`` records the image its backend ran when the request named none; that
    is dropped, and the framework the job asked for (``Emulator.Framework``) is run again."""
    algo = doc["AlgorithmSpecification"]
    if algo.get("AlgorithmName"):
        raise RequestError("AlgorithmSpecification.AlgorithmName", f"{algo['AlgorithmName']!r}: built-in and "
                           "AWS Marketplace algorithms are not replayed (their container is AWS's)",
                           allowed="jobs of a PyTorch or Hugging Face framework estimator (a DLC TrainingImage)")
    image = algo.get("TrainingImage")
    if not image or ("Emulator" in doc and EMULATOR_IMAGES.match(str(image))):
        recorded = _recorded_framework(doc)
        if framework_version is not None or recorded.get("Source") not in ("framework_version", "current"):
            return None, framework_version, None
        return None, recorded.get("FrameworkVersion"), recorded.get("PyVersion")
    frameworks.parse_dlc_image(str(image))  # the translator's refusal of TensorFlow, MXNet, XGBoost … images
    if not frameworks.is_dlc_image(str(image)):
        raise RequestError(frameworks.FIELD_IMAGE, f"{image!r} is not a PyTorch or Hugging Face DLC image",
                           allowed="PyTorch DLCs (…/pytorch-training:<version>-…, …/pytorch:<version>-…) and "
                                   "Hugging Face PyTorch DLCs (…/huggingface-pytorch-training:…)")
    return str(image), framework_version, None


def region_of(doc: Mapping[str, Any]) -> str:
    """The region the ``TrainingJobArn`` names (the hosts' ``AWS_REGION``), else the emulator's default."""
    match = ARN_REGION.match(str(doc.get("TrainingJobArn") or ""))
    return match.group(1) if match else P.DEFAULT_REGION


def recorded_gpus(doc: Mapping[str, Any]) -> int | None:
    """The GPU scale-down an emulator ``job.json`` records (``Emulator.Deviations``), else None."""
    emulator = doc.get("Emulator")
    for line in (emulator.get("Deviations") or []) if isinstance(emulator, dict) else []:
        match = GPU_DEVIATION.search(str(line))
        if match:
            return int(match.group(1))
    return None


def _code(hps: Mapping[str, str], v3: bool, source_dir: Path | None, fetch_code: FetchCode | None,
          temp: list[Path]) -> Located | None:
    """Where the v2 code comes from; None for v3 (its code is channels) or a job the translator refuses."""
    if v3:
        if source_dir is not None:
            raise RequestError("--source-dir", "an SDK v3 (ModelTrainer) job has no source dir: its code is "
                               f"the {V3_CODE_CHANNEL} and {V3_DRIVERS_CHANNEL} channels",
                               allowed=f"--channel {V3_CODE_CHANNEL}=DIR --channel {V3_DRIVERS_CHANNEL}=DIR")
        return None
    if "sagemaker_program" not in hps:
        return None  # the translator names what is missing
    raw = hps.get("sagemaker_submit_directory")
    recorded = str(dist.decode(raw)) if raw is not None else None
    if source_dir is not None:
        return Located("code", recorded, source_code(source_dir, "--source-dir"), "--source-dir")
    local = _local(recorded) if recorded and recorded != P.CODE_DIR else None
    if local is not None:
        return Located("code", recorded, source_code(local, "HyperParameters.sagemaker_submit_directory"),
                       "as recorded")
    if recorded and recorded.startswith("s3://") and fetch_code is not None:
        fetched = fetch_code(recorded, temp)
        return Located("code", recorded, source_code(fetched, "HyperParameters.sagemaker_submit_directory"),
                       "downloaded")
    where = f" is {recorded}" if recorded and recorded != P.CODE_DIR else " was not recorded"
    raise RequestError("--source-dir", f"missing: the job's code (HyperParameters.sagemaker_submit_directory){where}",
                       allowed=SOURCE_ALLOWED)


def source_code(path: Path, field_name: str) -> Path:
    """``path`` if it is a folder or a readable tar archive, else a :class:`RequestError`."""
    path = Path(path).expanduser().absolute()
    if path.is_dir():
        return path
    if not path.is_file():
        raise RequestError(field_name, f"{path} does not exist", allowed=SOURCE_ALLOWED)
    try:
        with tarfile.open(path) as tar:
            tar.getmembers()
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise RequestError(field_name, f"{path} is not a readable .tar.gz ({exc})", allowed=SOURCE_ALLOWED) from None
    return path


def _local(uri: str | None) -> Path | None:
    """The existing local path a ``file://`` URI or an absolute path names, else None."""
    if not uri:
        return None
    parsed = urlparse(uri)
    path = Path(parsed.path) if parsed.scheme == "file" else Path(uri) if not parsed.scheme and uri.startswith("/") \
        else None
    return path if path is not None and path.exists() else None


def channel_uri(source: Mapping[str, Any]) -> str | None:
    """A channel's recorded location: its ``S3Uri``, ``FileUri`` or file system."""
    if "S3DataSource" in source:
        return source["S3DataSource"].get("S3Uri")
    if "FileDataSource" in source:
        return source["FileDataSource"].get("FileUri")
    fs = source.get("FileSystemDataSource")
    if isinstance(fs, dict):
        return f"{fs.get('FileSystemType', 'FileSystem')}:{fs.get('FileSystemId', '')}{fs.get('DirectoryPath', '')}"
    return None


def _with_path(source: Mapping[str, Any], path: Path) -> dict[str, Any]:
    if "S3DataSource" in source:
        return {"S3DataSource": {**source["S3DataSource"], "S3Uri": path.as_uri()}}
    return {"FileDataSource": {"FileUri": path.as_uri()}}


def _channels(recorded: list[Any], given: Mapping[str, Path], *, sample: int | None = None,
              fetch_prefix: FetchPrefix | None = None,
              temp: list[Path] | None = None) -> tuple[list[dict[str, Any]], list[Located]]:
    """Each recorded channel with a local folder: ``--channel``, a local URI as recorded, or, with
    ``fetch_prefix`` (AWS credentials), downloaded from its ``S3Prefix``: all of a v3 ``code`` or
    ``sm_drivers`` channel when read by name, the first ``sample`` objects of any other with
    ``--sample``. The channels still without a folder are refused together."""
    temp = [] if temp is None else temp
    names = [str(c.get("ChannelName", "")) for c in recorded]
    extra = sorted(set(given) - set(names))
    if extra:
        raise RequestError("--channel", f"{', '.join(extra)}: not a channel of the job",
                           allowed=", ".join(names) or "none: the job has no input channels")
    out: list[dict[str, Any]] = []
    located: list[Located] = []
    missing: list[tuple[str, str | None]] = []
    for spec, name in zip(recorded, names):
        source = spec.get("DataSource") or {}
        uri = channel_uri(source)
        if name in given:
            place = Located(name, uri, Path(given[name]).expanduser().absolute(), "--channel")
        elif (local := _local(uri)) is not None:
            place = Located(name, uri, local, "as recorded")
        elif (fetched := _download(name, source, sample, fetch_prefix, temp)) is not None:
            place = fetched
        else:
            missing.append((name, uri))
            continue
        located.append(place)
        out.append({**spec, "DataSource": _with_path(source, place.local)})
    if missing:
        hint = "" if fetch_prefix is not None else " (or --sample N with AWS credentials: the first N objects of " \
            "each S3 prefix are downloaded)"
        raise RequestError("InputDataConfig", f"{len(missing)} channel(s) of the job have no folder: "
                           + "; ".join(f"{n} ({_what(n)}{uri or 'no location'})" for n, uri in missing),
                           allowed=" ".join(f"--channel {n}=DIR" for n, _ in missing) + hint)
    return out, located


def _download(name: str, source: Mapping[str, Any], sample: int | None, fetch_prefix: FetchPrefix | None,
              temp: list[Path]) -> Located | None:
    """The channel downloaded from S3 (see :func:`_channels`), or None when it is not to be."""
    s3 = source.get("S3DataSource")
    if fetch_prefix is None or not isinstance(s3, dict) or not str(s3.get("S3Uri", "")).startswith("s3://"):
        return None
    if s3.get("S3DataType", "S3Prefix") != "S3Prefix":
        return None  # a manifest names objects anywhere; its channel needs --channel
    uri = str(s3["S3Uri"])
    if name in (V3_CODE_CHANNEL, V3_DRIVERS_CHANNEL):
        folder, count = fetch_prefix(uri, CODE_CHANNEL_MAX, temp)
        how = f"downloaded: all {count} object(s)"
    elif sample is not None:
        folder, count = fetch_prefix(uri, sample, temp)
        how = f"sampled: the first {count} object(s) under the prefix (--sample {sample})"
    else:
        return None
    if count == 0:  # SageMaker fails such a job: no S3 objects found under the channel's URI
        raise RequestError(f"InputDataConfig.{name}", f"no objects under {uri}",
                           allowed=f"--channel {name}=DIR, or an S3 prefix that holds objects")
    return Located(name, uri, folder, how)


def _what(name: str) -> str:
    return {V3_CODE_CHANNEL: "SDK v3's code channel, the ModelTrainer's source_dir: ",
            V3_DRIVERS_CHANNEL: "SDK v3's driver scripts: "}.get(name, "")


def _resources(recorded: Mapping[str, Any], hosts: int | None) -> tuple[dict[str, Any], list[str]]:
    rc = copy.deepcopy(dict(recorded))
    if hosts is None:
        return rc, []
    if rc.get("InstanceGroups"):
        raise RequestError("--hosts", "the job has instance groups (ResourceConfig.InstanceGroups); one host "
                           "count does not scale them", allowed="no --hosts: the groups replay as recorded")
    scaled = [f"hosts: {rc.get('InstanceCount')} → {hosts} (--hosts)"] if rc.get("InstanceCount") != hosts else []
    rc["InstanceCount"] = hosts
    return rc, scaled


__all__ = ["ACCEPTED_NOT_EMULATED", "NOT_REPLAYED", "Located", "Options", "Replay", "build", "channel_uri",
           "check_document", "recorded_gpus", "recorded_profile", "region_of", "replay_name", "source_code",
           "training_image"]
