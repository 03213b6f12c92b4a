"""Where the image build (``docker/build.py``) runs from: a source checkout's ``docker/`` folder, or
the copy an installed wheel carries.

The wheel ships ``docker/`` (``build.py``, ``Dockerfile``, ``build-base.sh``, ``entrypoint.sh``,
``torch-wheels.sh``) as the package data ``emulator/backends/docker/context/`` (pyproject.toml),
byte for byte. ``build.py`` expects a checkout around it (``../emulator/backends/manifest.py``, and
``docker/.build/`` to write build contexts to), and an image's tag is a hash of the *contents* of
those files, not of their paths. So from a wheel, :func:`build_script` lays the same files out as a
checkout would, in the cache folder (``images/build/<hash of the files>/``: site-packages may be read-only), and runs
``build.py`` there: the same bytes give the same tags, so an installed emulator finds the images a
checkout built and builds the ones it lacks as a checkout does.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from ...cache import cache_dir
from .names import BUILD_SCRIPT

#: The wheel's copy of ``docker/`` (absent in a checkout, where :data:`~.names.BUILD_SCRIPT` is).
PACKAGED = Path(__file__).resolve().parent / "context"
#: The files of ``docker/`` the build reads (build.py's CONTEXT_FILES and what it runs).
FILES = ("build.py", "Dockerfile", "build-base.sh", "entrypoint.sh", "torch-wheels.sh")
#: The manifest writer build.py copies into each context, at the place a checkout has it.
MANIFEST = Path(__file__).resolve().parents[1] / "manifest.py"
#: Where installed emulators lay out their checkout-shaped copies.
TREES = cache_dir("images") / "build"


def packaged() -> bool:
    """Whether this install carries the build's files (a wheel that ships ``docker/``)."""
    return all((PACKAGED / name).is_file() for name in FILES) and MANIFEST.is_file()


def available() -> bool:
    """Whether DLC images can be built from this install (a checkout, or a wheel with its copy)."""
    return BUILD_SCRIPT.is_file() or packaged()


def source() -> Path | None:
    """The ``docker/`` folder the build's files come from (None: neither a checkout nor a wheel's copy)."""
    if BUILD_SCRIPT.is_file():
        return BUILD_SCRIPT.parent
    return PACKAGED if packaged() else None


def tree_name(files: dict[str, bytes]) -> str:
    """The folder name of a checkout-shaped copy of ``files`` (relative path -> bytes): a hash of
    their names and contents, so another emulator version's files get a folder of their own."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + files[rel] + b"\0")
    return h.hexdigest()[:16]


def layout(root: Path, files: dict[str, bytes]) -> Path:
    """The checkout-shaped copy of ``files`` under ``root`` (made once, atomically: a folder written
    beside it, then renamed; a racing process's copy is as good); returns its ``docker/build.py``."""
    tree = root / tree_name(files)
    if not (tree / "docker" / "build.py").is_file():
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tree-", dir=root))
        try:
            for rel, data in files.items():
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                (tmp / rel).write_bytes(data)
            (tmp / "docker" / "build-base.sh").chmod(0o755)
            try:
                os.rename(tmp, tree)
            except OSError:  # another process laid it out first
                if not (tree / "docker" / "build.py").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return tree / "docker" / "build.py"


def build_script(root: Path | None = None) -> Path | None:
    """The ``build.py`` to run: a checkout's ``docker/build.py``, else the wheel's files laid out as
    a checkout under ``root`` (default :data:`TREES`); None when this install has neither."""
    if BUILD_SCRIPT.is_file():
        return BUILD_SCRIPT
    if not packaged():
        return None
    files = {f"docker/{name}": (PACKAGED / name).read_bytes() for name in FILES}
    files["emulator/backends/manifest.py"] = MANIFEST.read_bytes()
    return layout(root or TREES, files)


__all__ = ["FILES", "PACKAGED", "available", "build_script", "layout", "packaged", "source", "tree_name"]
