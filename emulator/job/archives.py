"""Artifacts: ``model.tar.gz``/``output.tar.gz`` as SageMaker builds them, and safe extraction.

All hosts' ``/opt/ml/model`` trees are merged into one ``model.tar.gz`` (later hosts win on a
clash, as SDK local mode does; which host wins on the real service is not documented).
``output.tar.gz`` holds ``/opt/ml/output/data`` and is not created when every host's folder is
empty (observed on real jobs).
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterable
from pathlib import Path


def build_archive(target: Path, roots: Iterable[Path], *, always: bool) -> Path | None:
    """Tar the contents of every folder in ``roots`` (merged) into ``target``."""
    members: dict[str, Path] = {}
    for root in roots:
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            members[path.relative_to(root).as_posix()] = path
    if not members and not always:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target, "w:gz") as tar:
        for name, path in sorted(members.items()):
            if path.is_dir() and not path.is_symlink():
                tar.add(path, arcname=name, recursive=False)
            else:
                tar.add(path, arcname=name)
    return target


def safe_extract(archive: Path, dest: Path) -> None:
    """Extract a user's tarball safely (tarfile's ``data`` filter): members with ``..`` or links
    pointing outside ``dest`` and device files are refused; absolute names are made relative, so
    nothing lands outside ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
