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


def write_host(plan: JobPlan, host: HostPlan, root: Path) -> list[Mount]:
    """Write ``host``'s tree under ``root``; return the mounts it needs (channels, checkpoints)."""
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
    # --- sdk3 prototype (lead: fold into the rewrite): channels marked `copy` (SDK v3's code and
    # sm_drivers) are copied into the tree, writable, as SageMaker downloads File-mode channels.
    for c in request.channels:
        if c.copy:
            shutil.copytree(c.path, root / "input" / "data" / c.name, dirs_exist_ok=True)
    mounts = [Mount(c.path, f"/opt/ml/input/data/{c.name}", read_only=True) for c in request.channels
              if not c.copy]
    # --- end sdk3 prototype
    local = request.checkpoint_local_path.rstrip("/")
    if request.checkpoint_dir is not None and request.checkpoint_dir.is_dir():
        target = root / local[len("/opt/ml/"):] if local.startswith("/opt/ml/") else None
        if target is not None:
            shutil.copytree(request.checkpoint_dir, target, dirs_exist_ok=True)
    return mounts


def write_all(plan: JobPlan, job_dir: Path) -> dict[str, tuple[Path, list[Mount]]]:
    """Write every host's tree; return ``{host: (tree, mounts)}``."""
    out = {}
    for host in plan.hosts:
        root = host_root(job_dir, host.name)
        out[host.name] = (root, write_host(plan, host, root))
    return out


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
