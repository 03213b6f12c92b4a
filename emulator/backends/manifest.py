"""What a site-packages folder holds: its distributions and their top-level modules; and which
requirements of installed distributions are missing.

Read from the installed files (each distribution's ``RECORD``; ``top_level.txt`` where there is
none), never guessed from names: ``lightning-bolts`` provides ``pl_bolts``, ``python-dotenv``
provides ``dotenv``. The process backend records it for each framework layer
(:mod:`emulator.backends.layers`); the docker image build runs this file with the image's own
Python (``python3 manifest.py SITE_PACKAGES > manifest.json``; 3.8 and later) and keeps the result
in the image, where the docker backend reads it.

``python3 manifest.py --missing NAME...`` prints the requirements of the installed distributions
``NAME...`` that are not installed (names only): the emulator installs its toolkit pins without their
dependencies into a DLC's world (whose packages are dated before those pins were released), then
only what they lack (:mod:`emulator.backends.layers`, ``docker/Dockerfile``).

Standard library only, and no import of the emulator: it runs in images.
"""

from __future__ import annotations

import json
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

#: Where an image keeps its manifest.
IMAGE_PATH = "/opt/sm-emulator/manifest.json"


def canonical_name(name: str) -> str:
    """A distribution name as PEP 503 normalises it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def top_levels(dist: Any) -> set[str]:
    """The importable top-level names of an installed distribution: the first part of each file of
    its ``RECORD`` that is a package folder or a module (``.py``/``.so``), else ``top_level.txt``."""
    out: set[str] = set()
    for f in dist.files or ():
        parts = Path(str(f)).parts
        if not parts or parts[0] in ("..", "__pycache__") or parts[0].endswith(
                (".dist-info", ".egg-info", ".pth", ".data")):
            continue
        first = parts[0]
        if len(parts) > 1:
            if first.isidentifier():
                out.add(first)
        elif first.endswith(".py"):
            out.add(first[:-3])
        elif first.endswith(".so"):
            out.add(first.split(".")[0])
    if not out:
        out = {t for t in (dist.read_text("top_level.txt") or "").split() if t.isidentifier()}
    return out


def manifest(folders: list[str]) -> dict[str, Any]:
    """``{"distributions": {name: version}, "modules": [...], "owners": {module: [names]}}`` of
    what ``folders`` hold (the first of a name wins, as for imports)."""
    dists: dict[str, str] = {}
    owners: dict[str, list[str]] = {}
    for dist in metadata.distributions(path=folders):
        name = canonical_name(dist.metadata["Name"] or "")
        if not name or name in dists:
            continue
        dists[name] = dist.version
        for top in top_levels(dist):
            owners.setdefault(top, []).append(name)
    return {"distributions": dict(sorted(dists.items())), "modules": sorted(owners),
            "owners": {k: sorted(v) for k, v in sorted(owners.items())}}


def missing_requirements(names: list[str]) -> list[str]:
    """Names of what the installed distributions ``names`` require (their unconditional requirements:
    those without an ``extra`` marker) that is not installed, sorted."""
    installed = {canonical_name(d.metadata["Name"] or "") for d in metadata.distributions()}
    missing = set()
    for name in names:
        for line in metadata.requires(name) or ():
            requirement, _, marker = line.partition(";")
            if "extra" in marker:
                continue
            found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
            if found and canonical_name(found.group(1)) not in installed:
                missing.add(canonical_name(found.group(1)))
    return sorted(missing)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--missing"]:
        print(" ".join(missing_requirements(sys.argv[2:])))
    else:
        json.dump(manifest(sys.argv[1:]), sys.stdout, indent=1)
        sys.stdout.write("\n")
