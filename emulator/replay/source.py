"""Reading a replay's SOURCE: a DescribeTrainingJob JSON file, an emulator job folder, or a job by name.

A file is read as JSON (what ``aws sagemaker describe-training-job`` prints, ISO time strings and
all, or the emulator's ``job.json``); a folder holding a ``job.json`` is read as that file. Any
other SOURCE is a training job name or ARN, read with boto3's ``describe_training_job`` only when
boto3's credential chain finds credentials (the region: the ARN's, else boto3's configured one).
For such a job the code of an SDK v2 job (``sagemaker_submit_directory``, an ``s3://`` URI) and
the ``code`` and ``sm_drivers`` channels of an SDK v3 job are downloaded with the same credentials.
Data channels are downloaded only with ``--sample N`` (any SOURCE; it needs credentials too): the
first N objects ``ListObjectsV2`` lists under each channel's ``S3Prefix``, laid out as SageMaker
lays out a channel (:func:`emulator.sdk.s3.channel_name`).
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ..errors import RequestError
from ..job.request import JOB_NAME_RE
from ..sdk.s3 import channel_name, split_s3
from .mapping import FetchCode, FetchPrefix

JOB_FILE = "job.json"
ARN = re.compile(r"^arn:aws[a-z-]*:sagemaker:(?P<region>[a-z0-9-]+):\d{12}:training-job/(?P<name>[^/]+)$")
FILE_ALLOWED = ("a DescribeTrainingJob JSON file (`aws sagemaker describe-training-job --training-job-name NAME "
                "> job.json`), an emulator job.json or job folder, or a training job name or ARN")


@dataclass(frozen=True)
class Source:
    """A loaded document, where it came from, and how to download its code (by-name sources only)."""

    document: Any
    origin: str
    fetch_code: FetchCode | None = None
    fetch_prefix: FetchPrefix | None = None


def load(source: str) -> Source:
    """Read SOURCE; a :class:`RequestError` (field ``SOURCE``) when it cannot be."""
    path = Path(source).expanduser()
    if path.is_dir() and (path / JOB_FILE).is_file():
        path = path / JOB_FILE
    if path.is_file():
        return Source(read_json(path), origin=str(path))
    if path.is_dir():
        raise RequestError("SOURCE", f"{source} is a folder without a {JOB_FILE}", allowed=FILE_ALLOWED)
    arn = ARN.match(source)
    if arn is None and (not JOB_NAME_RE.match(source) or path.suffix == ".json"):
        raise RequestError("SOURCE", f"{source}: no such file, and not a training job name or ARN",
                           allowed=FILE_ALLOWED)
    return by_name(arn["name"] if arn else source, arn["region"] if arn else None)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise RequestError("SOURCE", f"{path} cannot be read ({exc})", allowed=FILE_ALLOWED) from None
    except ValueError as exc:
        script = " (a training script? `run` and `plan` take one as --entry-point)" if path.suffix == ".py" else ""
        raise RequestError("SOURCE", f"{path} is not JSON ({exc}){script}", allowed=FILE_ALLOWED) from None


def needs(name: str) -> str:
    return (f"AWS credentials boto3 finds (environment, ~/.aws, an instance role), or run "
            f"`aws sagemaker describe-training-job --training-job-name {name} > job.json` and pass job.json")


def _session(region: str | None, field: str, why: str, allowed: str) -> Any:
    """A boto3 session with credentials, else a :class:`RequestError` on ``field``."""
    try:
        import boto3
    except ImportError:
        raise RequestError(field, f"{why} needs boto3", allowed=allowed) from None
    session = boto3.Session(region_name=region) if region else boto3.Session()
    if session.get_credentials() is None:
        raise RequestError(field, f"{why} needs AWS credentials: boto3 found none", allowed=allowed)
    return session


def by_name(name: str, region: str | None) -> Source:
    """DescribeTrainingJob ``name`` with boto3, refused without credentials."""
    from botocore.exceptions import BotoCoreError, ClientError

    session = _session(region, "SOURCE", f"{name!r} is not a file, so it is read as a training job with "
                       "DescribeTrainingJob, which", needs(name))
    region = region or session.region_name
    if not region:
        raise RequestError("SOURCE", f"no AWS region to read training job {name!r} in",
                           allowed="the job's ARN (it names the region), or AWS_DEFAULT_REGION")
    try:
        found = session.client("sagemaker", region_name=region).describe_training_job(TrainingJobName=name)
    except (BotoCoreError, ClientError) as exc:
        raise RequestError("SOURCE", f"DescribeTrainingJob {name} in {region}: {exc}", allowed=needs(name)) from None
    found.pop("ResponseMetadata", None)

    def fetch_code(uri: str, temp: list[Path]) -> Path:
        return download(session, region, uri, temp)

    return Source(jsonable(found), origin=f"DescribeTrainingJob {name} ({region}, boto3)", fetch_code=fetch_code,
                  fetch_prefix=prefix_fetcher(session, region))


def sampler(region: str) -> FetchPrefix:
    """``--sample`` for a SOURCE that is a file: S3 downloads in ``region``, refused without
    credentials when a channel is to be downloaded (not before: ``--channel`` may cover them all)."""
    def fetch_prefix(uri: str, limit: int | None, temp: list[Path]) -> tuple[Path, int]:
        session = _session(region, "--sample", "downloading channel data from S3",
                           "AWS credentials boto3 finds, or a --channel NAME=DIR folder for each channel")
        return download_prefix(session, region, uri, limit, temp)

    return fetch_prefix


def prefix_fetcher(session: Any, region: str) -> FetchPrefix:
    """Downloads the first N objects under an S3 prefix with ``session`` (see :func:`download_prefix`)."""
    def fetch_prefix(uri: str, limit: int | None, temp: list[Path]) -> tuple[Path, int]:
        return download_prefix(session, region, uri, limit, temp)

    return fetch_prefix


def download_prefix(session: Any, region: str, uri: str, limit: int | None,
                    temp: list[Path]) -> tuple[Path, int]:
    """Download the first ``limit`` objects (None: all) ``ListObjectsV2`` lists under the prefix
    ``uri`` (in its order: by key, UTF-8 bytes), without "folder" markers, into a new temp folder
    (added to ``temp``), each at the path SageMaker gives it in the channel; return the folder and
    how many objects it holds."""
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, prefix = split_s3(uri)
    folder = Path(tempfile.mkdtemp(prefix="sm-emulator-replay-data-"))
    temp.append(folder)
    client = session.client("s3", region_name=region)
    count = 0
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                key = obj["Key"]
                if key.endswith("/"):
                    continue
                if limit is not None and count >= limit:
                    return folder, count
                target = (folder / channel_name(prefix, key)).resolve()
                if not target.is_relative_to(folder.resolve()):
                    raise RequestError("InputDataConfig", f"s3://{bucket}/{key} would land outside its channel",
                                       allowed="keys without '..' segments")
                target.parent.mkdir(parents=True, exist_ok=True)
                client.download_file(bucket, key, str(target))
                count += 1
    except (BotoCoreError, ClientError) as exc:
        raise RequestError("InputDataConfig", f"cannot download {uri} ({exc})",
                           allowed="a --channel NAME=DIR folder for the channel") from None
    return folder, count


def download(session: Any, region: str, uri: str, temp: list[Path]) -> Path:
    """Download the object ``uri`` into a new temp folder (added to ``temp``); return the file."""
    from botocore.exceptions import BotoCoreError, ClientError

    parsed = urlparse(uri)
    key = parsed.path.lstrip("/")
    folder = Path(tempfile.mkdtemp(prefix="sm-emulator-replay-code-"))
    temp.append(folder)
    target = folder / (Path(key).name or "sourcedir.tar.gz")
    try:
        session.client("s3", region_name=region).download_file(parsed.netloc, key, str(target))
    except (BotoCoreError, ClientError) as exc:
        raise RequestError("HyperParameters.sagemaker_submit_directory", f"cannot download {uri} ({exc})",
                           allowed="--source-dir DIR_OR_TAR: the job's code") from None
    return target


def jsonable(value: Any) -> Any:
    """``value`` with boto3's datetimes as ISO strings (as the AWS CLI prints them)."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


__all__ = ["JOB_FILE", "Source", "by_name", "download_prefix", "jsonable", "load", "read_json", "sampler"]
