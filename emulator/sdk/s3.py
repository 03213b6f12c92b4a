"""S3 for the emulator: moto's in-process S3, mirrored to a local folder that outlives the process.

The SageMaker SDK talks to S3 through boto3 (``upload_data``, the ``sourcedir.tar.gz`` upload,
``S3Downloader``). Those calls are answered by moto's S3 (``moto.mock_aws``, restricted to S3, STS,
IAM and CloudWatch Logs) — the emulator does not speak the S3 protocol itself. moto keeps objects in memory, so a
folder is the durable copy: object ``s3://BUCKET/KEY`` is the file ``<root>/BUCKET/KEY``.

* When the store opens, every file under the root is loaded into moto (eagerly; keep the root
  small or point ``SAGEMAKER_EMULATOR_S3_DIR`` at a per-project folder).
* Objects written through boto3 reach the folder when a training job is created (its inputs),
  when the store is flushed or closed, and at interpreter exit.
* Files the emulator writes (model and output archives, checkpoints) go to the folder first and
  are then loaded into moto, so ``model_data`` is readable both through boto3 and as a file.

Not emulated: versioning, deletes reaching the folder, object metadata, KMS, bucket policies,
ACLs, multipart ETags on disk, and S3 access from *inside* the emulated hosts (they have no AWS).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ..cache import cache_dir
from ..inhost import protocol as P

#: The default root of the S3 mirror.
DEFAULT_ROOT = cache_dir("s3")
#: Services moto answers while the emulator's S3 is open; everything else is refused by moto.
#: CloudWatch Logs carries the hosts' logs for SDK v3 (:mod:`emulator.sdk.cwlogs`), CloudWatch
#: the metric definitions' values (:mod:`emulator.sdk.cwmetrics`).
MOCKED_SERVICES = ["s3", "sts", "iam", "logs", "cloudwatch"]
#: The account moto reports (``sts get-caller-identity``).
ACCOUNT = P.ACCOUNT_ID
#: Folders under the root that hold emulator bookkeeping rather than buckets.
INTERNAL = ".emulator"

_lock = threading.Lock()
_mock: Any = None
_users = 0


def default_root() -> Path:
    env = os.environ.get("SAGEMAKER_EMULATOR_S3_DIR")
    return Path(env).expanduser().absolute() if env else DEFAULT_ROOT


def split_s3(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` → ``(bucket, key)``."""
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ValueError(f"{uri!r} is not an s3:// URI")
    return parsed.netloc, parsed.path.lstrip("/")


def _start_mock() -> None:
    global _mock, _users
    with _lock:
        if _users == 0:
            from moto import mock_aws

            _mock = mock_aws(config={"core": {"service_whitelist": MOCKED_SERVICES,
                                              "mock_credentials": True, "passthrough": {}}})
            _mock.start()
        _users += 1


def _stop_mock() -> None:
    global _mock, _users
    with _lock:
        _users -= 1
        if _users == 0 and _mock is not None:
            _mock.stop()
            _mock = None


class S3Store:
    """moto S3 in this process, backed by the folder ``root``."""

    def __init__(self, root: Path | None = None, *, region: str = P.DEFAULT_REGION) -> None:
        self.root = (root or default_root()).absolute()
        self.region = region
        self._etags: dict[tuple[str, str], str] = {}
        self._open = False
        self._s3: Any = None

    # lifecycle ---------------------------------------------------------------------------
    def open(self) -> S3Store:
        if self._open:
            return self
        _start_mock()
        self._open = True
        import boto3

        self.root.mkdir(parents=True, exist_ok=True)
        self._s3 = boto3.session.Session(region_name=self.region).client("s3")
        self._load_all()
        atexit.register(self.close)
        return self

    def close(self) -> None:
        if not self._open:
            return
        try:
            self.flush()
        finally:
            self._open = False
            _stop_mock()
            atexit.unregister(self.close)

    @property
    def client(self) -> Any:
        if not self._open:
            self.open()
        return self._s3

    # folder → moto -----------------------------------------------------------------------
    def _buckets(self) -> set[str]:
        return {b["Name"] for b in self.client.list_buckets().get("Buckets", [])}

    def ensure_bucket(self, bucket: str) -> None:
        if bucket in self._buckets():
            return
        kwargs: dict[str, Any] = {"Bucket": bucket}
        if self.region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
        self.client.create_bucket(**kwargs)

    def _load_all(self) -> None:
        for bucket_dir in sorted(p for p in self.root.iterdir() if p.is_dir()):
            if bucket_dir.name.startswith("."):
                continue
            self.load(bucket_dir)

    def load(self, path: Path) -> None:
        """Put the file or folder ``path`` (under the root) into moto at its key."""
        path = path.absolute()
        rel = path.relative_to(self.root)
        if not rel.parts:
            raise ValueError("load a bucket folder or a path below it, not the root")
        self.ensure_bucket(rel.parts[0])
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for f in files:
            parts = f.relative_to(self.root).parts
            bucket, key = parts[0], "/".join(parts[1:])
            data = f.read_bytes()
            self.client.put_object(Bucket=bucket, Key=key, Body=data)
            self._etags[(bucket, key)] = f'"{hashlib.md5(data).hexdigest()}"'

    # moto → folder -----------------------------------------------------------------------
    def local_path(self, uri: str) -> Path:
        """Where ``s3://bucket/key`` lives in the folder."""
        bucket, key = split_s3(uri)
        return self.root.joinpath(bucket, *[p for p in key.split("/") if p])

    def s3_uri(self, path: Path) -> str:
        rel = path.absolute().relative_to(self.root)
        return "s3://" + "/".join(rel.parts)

    def save(self, uri: str) -> Path:
        """Write every object under the prefix ``uri`` to the folder; return its local path."""
        bucket, prefix = split_s3(uri)
        if bucket in self._buckets():
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for page in pages:
                for obj in page.get("Contents", []):
                    key = obj["Key"]
                    if key.endswith("/") or self._etags.get((bucket, key)) == obj["ETag"]:
                        continue
                    target = self.root.joinpath(bucket, *[p for p in key.split("/") if p])
                    target.parent.mkdir(parents=True, exist_ok=True)
                    body = self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
                    target.write_bytes(body)
                    self._etags[(bucket, key)] = obj["ETag"]
        return self.local_path(uri)

    def list_keys(self, uri: str) -> list[str]:
        """The keys ``ListObjectsV2`` lists for the prefix ``uri`` (every key that starts with the
        prefix, as S3 matches them: ``s3://b/data/train-`` lists ``data/train-0.csv``), without
        zero-byte "folder" markers (keys ending in ``/``); empty for a bucket that does not exist."""
        bucket, prefix = split_s3(uri)
        if bucket not in self._buckets():
            return []
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [obj["Key"] for page in pages for obj in page.get("Contents", [])
                if not obj["Key"].endswith("/")]

    def flush(self) -> None:
        """Write every bucket moto holds to the folder."""
        if not self._open:
            return
        for bucket in self._buckets():
            self.save(f"s3://{bucket}/")


def channel_name(prefix: str, key: str) -> str:
    """Where object ``key``, listed under the S3 prefix ``prefix``, lands in its channel folder.

    A key below ``prefix/`` keeps its path below it (``data/train`` + ``data/train/a/b.csv`` →
    ``a/b.csv``: the common ``upload_data`` case, whose URI has no trailing slash). Any other key
    keeps its path below the prefix's last ``/``, so a partial-key prefix keeps whole file names
    (``data/train`` + ``data/train-data.csv`` → ``train-data.csv``), as observed on SageMaker in
    aws/sagemaker-python-sdk#3612 (SDK local mode names it ``-data.csv`` instead), and a prefix
    naming one object gives that object's file name.
    """
    if prefix and not prefix.endswith("/") and key.startswith(prefix + "/"):
        return key[len(prefix) + 1:]
    return key[prefix.rfind("/") + 1:]


_default: S3Store | None = None


def default_store(region: str = P.DEFAULT_REGION) -> S3Store:
    """The process-wide store over :func:`default_root` (opened on first use)."""
    global _default
    if _default is None or _default.root != default_root():
        _default = S3Store(default_root(), region=region)
    return _default.open()
