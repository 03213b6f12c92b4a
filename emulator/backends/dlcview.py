"""The *DLC view*: the part of the caller's site-packages a job environment may see (process backend).

A job on SageMaker sees what its DLC ships plus what its ``requirements.txt`` installs, never the
packages of the machine that launched it. The process backend has no image: its job environments
(:mod:`emulator.backends.jobenv`) reuse the packages installed here. They no longer see all of them: a job
environment's ``.pth`` adds one directory, the view, holding symlinks to only these distributions
installed here:

- those in the framework family's DLC list (:attr:`emulator.job.frameworks.Family.packages`; e.g.
  aws/deep-learning-containers ``docker/pytorch/2.13/cpu/pyproject.toml``),
- what hosts need to run: the toolkits, mpi4py, paramiko (the emulator's in-host code under
  ``emulator/inhost`` imports it and torch), pip/setuptools/wheel (the toolkit's
  ``pip install -r requirements.txt``; a DLC has them),
- the caller's torch only when it is the family's torch (``current``: always); otherwise the job
  environment installs the family's torch and the caller's torch, and every distribution here
  that requires it (its C++ ABI is the caller's torch's), stay out,
- and the transitive closure of their requirements, read from the installed metadata
  (``importlib.metadata`` ``requires``; markers evaluated with ``packaging`` for this interpreter).

Each distribution contributes its top-level files (from its ``RECORD``, else ``top_level.txt``) and
its ``.dist-info``. A top-level folder that other installed distributions also fill (a namespace
package such as ``google``) becomes a real folder holding links to the included distributions'
entries only. Anything else installed here (Lightning, transformers, pytest, docker, moto, ...)
is invisible to the job unless its ``requirements.txt`` installs it.

Not emulated: a DLC package not installed on this machine is missing here (a ``requirements.txt``
can add it); packages installed here are at this machine's versions, not the DLC's; editable
installs are left out (their code is outside site-packages).

Views are cached under ``~/.cache/sagemaker-emulator/views``, keyed by this interpreter, its
site-packages folders and the family; a stamp of those folders' modification times makes a changed
site-packages build a new view (the stable path is a symlink swapped atomically to it).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import site
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cache import cache_dir
from ..job.frameworks import canonical_name as canonical

if TYPE_CHECKING:
    from ..job.frameworks import Family

VIEWS = cache_dir("views")
#: Changes when what a view holds changes.
LAYOUT = "2"
#: What hosts need besides the DLC's list (see the module docstring).
HOST_NEEDS = ("sagemaker-training", "sagemaker-pytorch-training", "mpi4py", "paramiko", "pip", "setuptools",
              "wheel")


def site_paths() -> list[str]:
    """This interpreter's site-packages folders (and the user site), those that exist."""
    paths = [p for p in site.getsitepackages() if os.path.isdir(p)]
    user = site.getusersitepackages()
    if isinstance(user, str) and os.path.isdir(user):
        paths.append(user)
    return paths


def _family_key(fam: Family | None) -> str:
    return fam.name if fam is not None else "current"


def key(fam: Family | None) -> str:
    """The cache key of ``fam``'s view for this interpreter (stable while site-packages changes)."""
    data = "\0".join([LAYOUT, sys.executable, sys.version, *site_paths(), _family_key(fam)])
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def path(fam: Family | None) -> Path:
    """Where ``fam``'s view is (a symlink to the current build; :func:`ensure` makes it)."""
    return VIEWS / key(fam)


def _stamp() -> str:
    return "-".join(str(os.stat(p).st_mtime_ns) for p in site_paths())


def _roots(fam: Family | None, caller_torch: str | None) -> tuple[set[str], bool]:
    """Root distributions and whether the caller's torch may be seen."""
    from ..job import frameworks

    packages = frameworks.dlc_packages(fam)
    torch_ok = caller_torch is not None and (fam is None or caller_torch.split("+")[0] == fam.torch.split("+")[0])
    roots = {canonical(n) for n in (*packages, *HOST_NEEDS)}
    if torch_ok:
        roots.add("torch")
    return roots, torch_ok


def _requires(dist: metadata.Distribution, extras: Iterable[str]) -> list[tuple[str, frozenset[str]]]:
    from packaging.requirements import InvalidRequirement, Requirement

    out = []
    for line in dist.requires or ():
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
            continue
        out.append((canonical(req.name), frozenset(req.extras)))
    return out


def closure(fam: Family | None) -> list[metadata.Distribution]:
    """The installed distributions ``fam``'s view holds (see the module docstring)."""
    installed: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions(path=site_paths()):
        name = canonical(dist.metadata["Name"] or "")
        if name and name not in installed:  # first on sys.path wins, as for imports
            installed[name] = dist
    caller_torch = installed["torch"].version if "torch" in installed else None
    roots, torch_ok = _roots(fam, caller_torch)
    seen: dict[str, set[str]] = {}
    queue: list[tuple[str, frozenset[str]]] = [(r, frozenset()) for r in sorted(roots)]
    while queue:
        name, extras = queue.pop()
        found = installed.get(name)
        if found is None or (name in seen and extras <= seen[name]):
            continue
        if not torch_ok and (name == "torch" or any(n == "torch" for n, _ in _requires(found, extras))):
            continue
        seen.setdefault(name, set()).update(extras)
        queue.extend(_requires(found, seen[name]))
    return [installed[n] for n in sorted(seen)]


def _entries(dist: metadata.Distribution) -> tuple[Path, set[str], set[tuple[str, str]]]:
    """A distribution's site folder, its top-level names and its ``(top, second)`` path pairs."""
    base = Path(str(dist.locate_file("")))
    tops: set[str] = set()
    pairs: set[tuple[str, str]] = set()
    info = getattr(dist, "_path", None)  # the .dist-info/.egg-info folder (PathDistribution)
    files: list[Any] | None = list(dist.files) if dist.files is not None else None
    if isinstance(info, Path) and info.suffix == ".egg-info":
        # A legacy ``setup.py install`` (pip without ``wheel``): Python 3.11 lists SOURCES.txt (the source
        # tree's paths); what was installed is installed-files.txt, relative to the .egg-info folder.
        listed = dist.read_text("installed-files.txt")
        files = [os.path.normpath(os.path.join(info.name, line.strip()))
                 for line in listed.splitlines() if line.strip()] if listed else None
    if files is not None:
        for f in files:
            parts = Path(str(f)).parts
            if not parts or parts[0] in ("..", "__pycache__") or parts[0].startswith("__editable__") \
                    or parts[0].endswith(".pth"):
                continue
            tops.add(parts[0])
            if len(parts) >= 2:
                pairs.add((parts[0], parts[1]))
    else:
        tops.update(t for t in (dist.read_text("top_level.txt") or "").split() if t)
    if isinstance(info, Path):
        tops.add(info.name)
    return base, {t for t in tops if (base / t).exists() or (base / f"{t}.py").exists()}, pairs


def _build(target: Path, fam: Family | None) -> None:
    target.mkdir(parents=True)
    included = closure(fam)
    owners: dict[str, set[str]] = {}
    for dist in metadata.distributions(path=site_paths()):
        for top in _entries(dist)[1]:
            owners.setdefault(top, set()).add(canonical(dist.metadata["Name"] or ""))
    names = {canonical(d.metadata["Name"] or "") for d in included}
    for dist in included:
        base, tops, pairs = _entries(dist)
        for top in tops:
            src = base / top if (base / top).exists() else base / f"{top}.py"
            link = target / src.name
            if owners.get(top, set()) <= names or not src.is_dir():
                if not link.exists() and not link.is_symlink():
                    link.symlink_to(src)
                continue
            # A folder shared with distributions left out (namespace package): link ours only.
            link.mkdir(exist_ok=True)
            for first, second in pairs:
                if first == top and not (link / second).exists() and (src / second).exists():
                    (link / second).symlink_to(src / second)


def ensure(fam: Family | None) -> Path:
    """``fam``'s view for this interpreter, built (once per site-packages change) if needed."""
    VIEWS.mkdir(parents=True, exist_ok=True)
    stable = path(fam)
    target = VIEWS / f"{stable.name}-{hashlib.sha256(_stamp().encode()).hexdigest()[:8]}"
    with open(VIEWS / f"{stable.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stable.is_symlink() and os.readlink(stable) == target.name and (target / ".ready").exists():
            return stable
        if not (target / ".ready").exists():
            import shutil

            shutil.rmtree(target, ignore_errors=True)
            _build(target, fam)
            (target / ".ready").touch()
        tmp = VIEWS / f"{stable.name}.tmp"
        if tmp.is_symlink():
            tmp.unlink()
        tmp.symlink_to(target.name)
        os.replace(tmp, stable)
    return stable
