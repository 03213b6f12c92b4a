"""``python -m emulator cache [prune]``: what the emulator keeps on this machine, and removing it.

What is listed, with its size, its last use and what uses it now:

- **environment**: job environments (:mod:`emulator.backends.jobenv`, ``envs/``); last use is their
  lock file's time (every job that runs in one opens it);
- **layer**: framework layers (:mod:`emulator.backends.layers`, ``frameworks/``); last use is the
  newest of their own and that of every environment that sees them;
- **wheelhouse**: the docker backend's requirement wheels (``wheelhouse/``), last use as above;
- **image**: the docker images the emulator built (label ``sagemaker-emulator.inputs``); docker
  keeps no time of use, so their build time stands in;
- **s3**: the SDK sessions' local S3 (``s3/``): listed, never pruned (it holds your jobs' outputs).

In use means: a process on this machine has a file of it mapped, open, as its executable or its
working folder (``/proc``, which also shows the processes of running hosts), a container uses it
(an image, or a wheelhouse mounted into one), or its lock is held (being made right now). What is
in use is never removed: ``prune`` names it and what uses it.

``prune`` with no option removes only what nothing can use any more (environments whose interpreter
is gone, half-made ``.part`` layers); ``--older-than DURATION`` also what was last used longer ago;
``--all`` everything not in use. A layer goes with the environments that see it (kept if one of
them is in use). The engine's own build cache and the base images are docker's to prune
(``docker builder prune``).
"""

from __future__ import annotations

import calendar
import fcntl
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from ..cache import cache_dir
from ..console import table
from ..errors import BackendUnavailable, RequestError
from . import jobenv, layers
from .docker import engine

#: The image label every image the emulator builds carries (docker/build.py).
IMAGE_LABEL = "sagemaker-emulator.inputs"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class Entry:
    """One thing the emulator keeps: ``where`` a folder, or an image's tag."""

    kind: str
    where: str  #: a folder, or an image's tags (separated by spaces)
    size: int
    last_use: float  #: seconds since the epoch
    users: tuple[str, ...] = ()  #: what uses it now ("pid 123 python3", "container x", "being made")
    unusable: bool = False  #: nothing can use it any more (a gone interpreter, a half-made layer)
    sees: tuple[str, ...] = field(default=(), compare=False)  #: an environment's layers


def parse_duration(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` (or plain seconds) as seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if not m:
        raise RequestError("--older-than", f"{text!r} is not a duration", allowed="a number with s, m, h, d or w: 30d")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def _size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


def _mtime(*paths: Path) -> float:
    times = []
    for p in paths:
        try:
            times.append(p.stat().st_mtime)
        except OSError:
            pass
    return max(times, default=0.0)


def _held(lock: Path) -> bool:
    """True when another process holds ``lock`` (a folder being made or resolved right now)."""
    if not lock.is_file():
        return False
    with open(lock, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def open_paths() -> dict[str, str]:
    """Every path a process here has mapped, open, as its executable or working folder: path ->
    "pid N name" (the processes of running hosts included; those of other users only as root)."""
    found: dict[str, str] = {}
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        base = f"/proc/{pid}"
        try:
            who = f"pid {pid} {Path(base, 'comm').read_text().strip()}"
        except OSError:
            continue
        paths = []
        for link in ("exe", "cwd"):
            try:
                paths.append(os.readlink(f"{base}/{link}"))
            except OSError:
                pass
        try:
            paths += [os.readlink(f"{base}/fd/{fd}") for fd in os.listdir(f"{base}/fd")]
        except OSError:
            pass
        try:
            with open(f"{base}/maps") as maps:
                paths += [line.split(None, 5)[5].strip() for line in maps if line.count(" ") >= 5 and "/" in line]
        except (OSError, IndexError):
            pass
        for p in paths:
            found.setdefault(p.removesuffix(" (deleted)"), who)
    return found


def _users(folder: Path, opened: dict[str, str], mounted: dict[str, str]) -> tuple[str, ...]:
    prefix = f"{folder}/"
    users = {who for path, who in opened.items() if path == str(folder) or path.startswith(prefix)}
    users |= {who for path, who in mounted.items() if path == str(folder) or path.startswith(prefix)}
    if _held(folder.with_name(folder.name + ".lock")):
        users.add("being made (its lock is held)")
    return tuple(sorted(users))


def _folders(root: Path) -> Iterator[Path]:
    if root.is_dir():
        yield from sorted(p for p in root.iterdir() if p.is_dir())


def _engine_facts() -> tuple[Any | None, dict[str, str], dict[str, list[str]]]:
    """The docker client (None without an engine), host folders mounted into containers -> the
    container, and image id -> the containers that use it."""
    try:
        client = engine.client()
    except BackendUnavailable:
        return None, {}, {}
    mounted: dict[str, str] = {}
    by_image: dict[str, list[str]] = {}
    for c in client.containers.list(all=True, ignore_removed=True):
        by_image.setdefault(c.attrs.get("Image", ""), []).append(f"container {c.name}")
        for m in c.attrs.get("Mounts", []):
            if m.get("Source"):
                mounted[m["Source"]] = f"container {c.name}"
    return client, mounted, by_image


def entries(*, cache: Path | None = None) -> list[Entry]:
    """Everything the emulator keeps here, in use or not."""
    root = cache or cache_dir()
    opened = open_paths()
    client, mounted, by_image = _engine_facts()
    out: list[Entry] = []
    for venv in _folders(root / jobenv.CACHE.name):
        origin = venv / jobenv.ORIGIN
        gone = not (origin.is_file() and Path(origin.read_text().strip()).is_dir())
        out.append(Entry("environment", str(venv), _size(venv), _mtime(venv, venv.with_name(venv.name + ".lock")),
                         _users(venv, opened, mounted), unusable=gone, sees=tuple(jobenv.layer_folders(venv))))
    envs = list(out)
    for folder in _folders(root / layers.LAYERS.name):
        layer = Entry("layer", str(folder), _size(folder), _mtime(folder, folder.with_name(folder.name + ".lock")),
                      _users(folder, opened, mounted), unusable=folder.name.endswith(".part"))
        seen = [e.last_use for e in envs if _layer_of(e, layer)]
        out.append(replace(layer, last_use=max([layer.last_use, *seen])))
    for wheels in _folders(root / "wheelhouse"):
        used = _mtime(wheels, wheels.with_name(wheels.name + ".lock"))
        out.append(Entry("wheelhouse", str(wheels), _size(wheels), used, _users(wheels, opened, mounted)))
    if (root / "s3").is_dir():
        out.append(Entry("s3", str(root / "s3"), _size(root / "s3"), _mtime(root / "s3")))
    if client is not None:
        for image in client.images.list(filters={"label": IMAGE_LABEL}):
            tag = " ".join(image.tags) or image.id  # every tag: removing one removes only it
            created = calendar.timegm(time.strptime(image.attrs["Created"][:19], "%Y-%m-%dT%H:%M:%S"))
            out.append(Entry("image", tag, int(image.attrs.get("Size", 0)), created,
                             tuple(sorted(by_image.get(image.id, [])))))
    return out


def _layer_of(env: Entry, layer: Entry) -> bool:
    return any(f == layer.where or f.startswith(f"{layer.where}/") for f in env.sees)


def chosen(found: Sequence[Entry], *, older_than: float | None = None, everything: bool = False,
           now: float | None = None) -> tuple[list[Entry], list[Entry]]:
    """``(remove, keep_in_use)``: what ``prune`` removes, and what it would but that is in use."""
    now = time.time() if now is None else now

    def wanted(e: Entry) -> bool:
        if e.kind == "s3":
            return False
        return everything or e.unusable or (older_than is not None and now - e.last_use > older_than)

    remove = {e.where: e for e in found if wanted(e)}
    for layer in [e for e in remove.values() if e.kind == "layer"]:
        for env in (e for e in found if e.kind == "environment" and _layer_of(e, layer)):
            remove.setdefault(env.where, env)  # an environment without its layer cannot run
    keep: dict[str, Entry] = {w: e for w, e in remove.items() if e.users}
    for layer in [e for e in remove.values() if e.kind == "layer"]:
        in_use = [env for env in found if env.kind == "environment" and _layer_of(env, layer) and env.users]
        if in_use and layer.where not in keep:
            keep[layer.where] = replace(layer, users=tuple(f"environment {Path(e.where).name}" for e in in_use))
    return [e for w, e in remove.items() if w not in keep], list(keep.values())


def remove(entry: Entry) -> str | None:
    """Remove one entry (a folder under its lock, or an image); None when done, else why not."""
    if entry.kind == "image":
        client = engine.client()
        try:
            for tag in entry.where.split():
                client.images.remove(tag)
        except Exception as exc:  # the SDK's APIError: e.g. a container created meanwhile uses it
            return str(exc)
        return None
    folder = Path(entry.where)
    lock = folder.with_name(folder.name + ".lock")
    with open(lock, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "being made (its lock is held)"
        shutil.rmtree(folder, ignore_errors=True)
    lock.unlink(missing_ok=True)
    return None if not folder.exists() else "could not remove every file"


def _ago(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return "just now"


def human(size: int) -> str:
    for unit, step in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= step:
            return f"{size / step:.1f} {unit}"
    return f"{size} B"


def render(found: Sequence[Entry], now: float | None = None) -> str:
    """The aligned list and the total size (an image's time is its build's: docker records no use)."""
    now = time.time() if now is None else now
    rows = [[e.kind, human(e.size), ("built " if e.kind == "image" else "") + _ago(now - e.last_use),
             ", ".join(e.users) or "-", e.where] for e in found]
    total = sum(e.size for e in found)
    return table(["kind", "size", "last use", "in use by", "where"], rows) + f"\ntotal {human(total)}"


def main(argv: Sequence[str], stream: TextIO = sys.stdout) -> int:
    """``cache [list]`` or ``cache prune [--older-than D] [--all]`` (``argv`` after ``cache``); exit 0."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m emulator cache")
    p.add_argument("action", nargs="?", choices=("list", "prune"), default="list")
    p.add_argument("--older-than", metavar="DURATION", help="prune also what was last used longer ago (30d, 12h)")
    p.add_argument("--all", action="store_true", help="prune everything not in use (not s3/)")
    args = p.parse_args(list(argv))
    older = parse_duration(args.older_than) if args.older_than is not None else None
    if args.action == "list":
        if args.older_than is not None or args.all:
            raise RequestError("cache", "--older-than and --all go with prune", allowed="cache prune --all")
        found = entries()
        stream.write((render(found) if found else f"nothing kept under {cache_dir()}") + "\n")
        return 0
    go, kept = chosen(entries(), older_than=older, everything=args.all)
    freed = 0
    for e in go:
        why = remove(e)
        if why is None:
            freed += e.size
            stream.write(f"removed {e.kind} {e.where} ({human(e.size)})\n")
        else:
            stream.write(f"kept {e.kind} {e.where}: {why}\n")
    for e in kept:
        stream.write(f"kept {e.kind} {e.where}: in use by {', '.join(e.users)}\n")
    stream.write(f"freed {human(freed)}; {len(kept)} in use kept\n")
    return 0
