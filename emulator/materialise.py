"""Materialise: write each host's ``/opt/ml`` tree from its plan (the only layer that writes them).

The tree of ``algo-N`` lives in ``<job dir>/hosts/algo-N`` on this machine and is mounted at
``/opt/ml`` inside the host. The source dir (or the SDK's ``sourcedir.tar.gz``) is unpacked into
``code`` of every host, as the toolkit would download it; channels are mounted read-only over
``input/data/<channel>``; a checkpoint folder is restored into each host's checkpoint path.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from .archives import safe_extract
from .backends.base import Mount
from .inhost import protocol as P
from .plan import HostPlan, JobPlan


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


def host_mounts(plan: JobPlan, host: str) -> tuple[Mount, ...]:
    """What a host mounts from this machine: its tree at ``/opt/ml``, then each channel read-only
    at ``/opt/ml/input/data/<channel>`` (except channels copied into the tree). Pure."""
    request = plan.request
    tree = Mount(host_root(request.job_dir, host), P.OPT_ML)
    return (tree, *(Mount(c.path, f"{P.OPT_ML}/input/data/{c.name}", read_only=True)
                    for c in request.channels if not c.copy))


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
    for c in request.channels:  # SDK v3's code and sm_drivers: copied, writable, as SageMaker downloads them
        if c.copy:
            shutil.copytree(c.path, root / "input" / "data" / c.name, dirs_exist_ok=True)
    local = request.checkpoint_local_path.rstrip("/")
    if request.checkpoint_dir is not None and request.checkpoint_dir.is_dir():
        target = root / local[len("/opt/ml/"):] if local.startswith("/opt/ml/") else None
        if target is not None:
            shutil.copytree(request.checkpoint_dir, target, dirs_exist_ok=True)


def write_all(plan: JobPlan) -> None:
    """Write every host's tree under ``<job dir>/hosts/``."""
    for host in plan.hosts:
        write_host(plan, host, host_root(plan.request.job_dir, host.name))


def sync_checkpoints(plan: JobPlan, job_dir: Path) -> None:
    """Copy every host's checkpoint folder back to ``CheckpointConfig.S3Uri`` (merged, as the
    platform's single S3 prefix for all instances is)."""
    request = plan.request
    local = request.checkpoint_local_path.rstrip("/")
    if request.checkpoint_dir is None or not local.startswith("/opt/ml/"):
        return
    request.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    for host in plan.hosts:
        src = host_root(job_dir, host.name) / local[len("/opt/ml/"):]
        if src.is_dir():
            shutil.copytree(src, request.checkpoint_dir, dirs_exist_ok=True)
