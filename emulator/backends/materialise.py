"""Materialise: write each host's ``/opt/ml`` tree from its plan (the only layer that writes them).

The tree of ``algo-N`` lives in ``<job dir>/hosts/algo-N`` on this machine and is mounted at
``/opt/ml`` inside the host. The source dir (or the SDK's ``sourcedir.tar.gz``) is unpacked into
``code`` of every host, as the toolkit would download it; channels are mounted read-only over
``input/data/<channel>`` (a ``ShardedByS3Key`` channel: each host's share of the files, see
:mod:`emulator.job.sharding`); a checkpoint folder is restored into each host's checkpoint path:
``CheckpointConfig.LocalPath`` under ``/opt/ml`` is a folder of the tree, elsewhere a per-host folder
(``<job dir>/hosts/algo-N.checkpoints``) mounted at that path (:mod:`emulator.preflight` refuses
paths the backend cannot mount). Checkpoints are synced back when the hosts stop (SageMaker uploads
them continually; a spot restart restores what the last attempt left).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from ..inhost import protocol as P
from ..job import sharding
from ..job.archives import safe_extract
from ..job.plan import HostPlan, JobPlan
from ..job.request import Channel, JobRequest
from .base import Mount


def host_root(job_dir: Path, host: str) -> Path:
    return job_dir / "hosts" / host


def _ignore_for(output_path: Path) -> Callable[[str, list[str]], set[str]]:
    """Skip caches, VCS folders and the job output folder when it lies inside the source dir."""
    skip = shutil.ignore_patterns("__pycache__", ".git")
    out = output_path.resolve()

    def ignore(folder: str, names: list[str]) -> set[str]:
        ignored = set(skip(folder, names))
        base = Path(folder).resolve()
        ignored |= {n for n in names if base / n == out}
        return ignored

    return ignore


def checkpoint_folder(request: JobRequest, host: str) -> Path | None:
    """Where ``host``'s ``CheckpointConfig.LocalPath`` lives on this machine (None without a
    ``CheckpointConfig.S3Uri`` and outside ``/opt/ml``: nothing is synced then)."""
    local = request.checkpoint_local_path.rstrip("/")
    if local.startswith(f"{P.OPT_ML}/"):
        return host_root(request.job_dir, host) / local[len(P.OPT_ML) + 1:]
    if request.checkpoint_dir is None:
        return None
    return request.job_dir / "hosts" / f"{host}.checkpoints"


def host_mounts(plan: JobPlan, host: str) -> tuple[Mount, ...]:
    """What a host mounts from this machine: its tree at ``/opt/ml``, then each channel read-only
    at ``/opt/ml/input/data/<channel>`` (except channels copied into the tree; a ``ShardedByS3Key``
    channel from the host's share), then a checkpoint folder outside ``/opt/ml``. Pure."""
    request = plan.request
    tree = Mount(host_root(request.job_dir, host), P.OPT_ML)
    channels = tuple(Mount(channel_source(plan, c, host), f"{P.OPT_ML}/input/data/{c.name}", read_only=True)
                     for c in request.channels if not c.copy)
    local = request.checkpoint_local_path.rstrip("/")
    folder = checkpoint_folder(request, host)
    outside = (Mount(folder, local),) if folder is not None and not local.startswith(f"{P.OPT_ML}/") else ()
    return (tree, *channels, *outside)


def channel_source(plan: JobPlan, channel: Channel, host: str) -> Path:
    """The folder mounted as ``channel`` in ``host``: the channel's, or for ``ShardedByS3Key`` with
    more than one host, the host's share (``<job dir>/hosts/algo-N.shards/<channel>``)."""
    if _sharded(plan.request, channel):
        return plan.request.job_dir / "hosts" / f"{host}.shards" / channel.name
    return channel.path


def _sharded(request: JobRequest, channel: Channel) -> bool:
    return channel.s3_distribution_type == "ShardedByS3Key" and request.host_count > 1


def write_host(plan: JobPlan, host: HostPlan, root: Path) -> None:
    """Write ``host``'s tree under ``root`` (config files, code, restored checkpoints)."""
    request = plan.request
    for d in host.dirs:
        (root / d).mkdir(parents=True, exist_ok=True)
    for rel, text in host.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    code = root / "code"
    source = request.source_dir
    if source.is_file():
        safe_extract(source, code)
    else:
        shutil.copytree(source, code, dirs_exist_ok=True, ignore=_ignore_for(request.output_path))
    for c in request.channels:
        # copied channels (SDK v3's code and sm_drivers): writable copies, as SageMaker downloads them
        target = root / "input" / "data" / c.name if c.copy else channel_source(plan, c, host.name)
        if _sharded(request, c):
            sharding.write_share(c.path, sharding.share(c.path, request.hosts, host.name), target, link=not c.copy)
        elif c.copy:
            shutil.copytree(c.path, target, dirs_exist_ok=True)
    folder = checkpoint_folder(request, host.name)
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        if request.checkpoint_dir is not None and request.checkpoint_dir.is_dir():
            shutil.copytree(request.checkpoint_dir, folder, dirs_exist_ok=True)


def write_all(plan: JobPlan) -> None:
    """Write every host's tree under ``<job dir>/hosts/``."""
    for host in plan.hosts:
        write_host(plan, host, host_root(plan.request.job_dir, host.name))


def sync_checkpoints(plan: JobPlan, job_dir: Path) -> None:
    """Copy every host's checkpoint folder back to ``CheckpointConfig.S3Uri`` (merged, as the
    platform's single S3 prefix for all instances is)."""
    request = plan.request
    if request.checkpoint_dir is None:
        return
    request.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    for host in plan.hosts:
        src = checkpoint_folder(request, host.name)
        if src is not None and src.is_dir():
            shutil.copytree(src, request.checkpoint_dir, dirs_exist_ok=True)
