"""Materialise: write each host's ``/opt/ml`` tree from its plan (the only layer that writes them).

The tree of ``algo-N`` lives in ``<job dir>/hosts/algo-N`` on this machine and is mounted at
``/opt/ml`` inside the host. The source dir (or the SDK's ``sourcedir.tar.gz``) is unpacked into
``code`` of every host, as the toolkit would download it; channels are mounted read-only over
``input/data/<channel>`` (a ``ShardedByS3Key`` channel: each host's share of the files, see
:mod:`emulator.job.sharding`); a checkpoint folder is restored into each host's checkpoint path:
``CheckpointConfig.LocalPath`` under ``/opt/ml`` is a folder of the tree, elsewhere a per-host folder
(``<job dir>/hosts/algo-N.checkpoints``) mounted at that path (:mod:`emulator.preflight` refuses
paths the backend cannot mount). Checkpoints are synced back when the hosts stop (SageMaker uploads
them continually; a spot restart restores what the last attempt left): what a host created or
changed is uploaded, what it deleted of what was restored is deleted (AWS's model-checkpoints
guide), and a restored file it left alone is not uploaded again, so a host that only received a
checkpoint cannot overwrite the one another host wrote. Not emulated: the upload's timing during
training (a file is there when the hosts stop, not seconds after it is written).
"""

from __future__ import annotations

import filecmp
import json
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
            _restored_record(request, host.name).write_text(json.dumps(_file_stats(folder)))


def write_all(plan: JobPlan) -> None:
    """Write every host's tree under ``<job dir>/hosts/``."""
    for host in plan.hosts:
        write_host(plan, host, host_root(plan.request.job_dir, host.name))


def _restored_record(request: JobRequest, host: str) -> Path:
    """Where the size and mtime of each file restored into ``host``'s checkpoint folder are kept
    (none when nothing was restored: then every file the host has is new)."""
    return request.job_dir / "hosts" / f"{host}.checkpoints-restored.json"


def _file_stats(folder: Path) -> dict[str, list[int]]:
    """Every file under ``folder`` (relative path → ``[size, mtime_ns]``)."""
    stats = {}
    for path in folder.rglob("*"):
        if path.is_file():
            st = path.stat()
            stats[path.relative_to(folder).as_posix()] = [st.st_size, st.st_mtime_ns]
    return stats


def sync_checkpoints(plan: JobPlan, job_dir: Path) -> None:
    """Upload what each host changed in its checkpoint folder to ``CheckpointConfig.S3Uri`` (one
    prefix for all instances, as on the platform): new and changed files, the latest write last;
    restored files a host deleted are deleted. A restored file is unchanged when its size and
    mtime are (or, where a copy through the engine's API rounded the mtime, its bytes are)."""
    request = plan.request
    target = request.checkpoint_dir
    if target is None:
        return
    target.mkdir(parents=True, exist_ok=True)
    uploads: list[tuple[int, str, Path]] = []
    deleted: set[str] = set()
    for host in plan.hosts:
        src = checkpoint_folder(request, host.name)
        if src is None or not src.is_dir():
            continue
        record = _restored_record(request, host.name)
        restored: dict[str, list[int]] = json.loads(record.read_text()) if record.exists() else {}
        now = _file_stats(src)
        deleted |= set(restored) - set(now)
        for rel, (size, mtime) in now.items():
            before = restored.get(rel)
            unchanged = before is not None and before[0] == size and (
                before[1] == mtime
                or ((target / rel).is_file() and filecmp.cmp(src / rel, target / rel, shallow=False)))
            if not unchanged:
                uploads.append((mtime, rel, src / rel))
    for rel in sorted(deleted - {rel for _, rel, _ in uploads}):
        (target / rel).unlink(missing_ok=True)
    for _, rel, path in sorted(uploads):
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target / rel)
