"""Short-lived helper containers the emulator starts outside any job, and reaping them.

Two kinds, each labelled ``sagemaker-emulator.helper=<kind>``: ``wheelhouse`` (resolving a
job's ``requirements.txt`` for its image, :mod:`emulator.backends.docker.wheelhouse`) and ``probe``
(reading what an image holds, :mod:`emulator.backends.docker.images`). Both run with ``--rm``, carry
the owner labels job containers carry (``owner-pid``/``owner-start``/``owner-host``) and are
removed by their owner in a ``finally``; what a killed owner leaves running is removed by
``python -m emulator reap``. (``docker/build.py`` starts no helper: pip runs inside ``docker build``,
whose containers the engine removes.)
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...inhost import protocol as P
from . import engine
from .names import (
    DEFAULT_IMAGE,
    LABEL_JOB,
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_OWNER_START,
    LABEL_SCRATCH,
    owner_labels,
)
from .names import LABEL_HELPER as LABEL


def labels(kind: str) -> dict[str, str]:
    """The labels of a helper container of ``kind`` owned by this process."""
    return {LABEL: kind, **owner_labels()}


def label_args(kind: str) -> list[str]:
    """``labels(kind)`` as ``docker run`` arguments."""
    return [a for k, v in labels(kind).items() for a in ("--label", f"{k}={v}")]


def _owner_dead(labels_: Mapping[str, str]) -> bool:
    """Whether the emulator process that ``labels_`` name (``owner-*``) is gone: False for another
    machine's, True for an unreadable pid."""
    if labels_.get(LABEL_OWNER_HOST) != socket.gethostname():
        return False
    try:
        pid = int(labels_.get(LABEL_OWNER_PID, ""))
    except ValueError:
        return True
    start = labels_.get(LABEL_OWNER_START) or ""
    return not P.pid_alive(pid, int(start) if start.isdigit() else None)


def owner_gone(name: str, labels_: Mapping[str, str], attrs: Mapping[str, Any]) -> bool:
    """Whether the process that started helper container ``name`` no longer exists (a container
    without owner labels is not ours to judge)."""
    return LABEL_OWNER_PID in labels_ and _owner_dead(labels_)


def reap(client: Any) -> list[str]:
    """Remove helper containers whose owner is gone; their names, one line each."""
    out = []
    for c in client.containers.list(all=True, ignore_removed=True, filters={"label": LABEL}):
        if not owner_gone(c.name, c.labels, c.attrs):
            continue
        try:
            c.remove(force=True, v=True)
        except Exception:
            continue
        out.append(f"removed helper container {c.name} ({c.labels.get(LABEL)}; owner gone)")
    return out


__all__ = ["LABEL", "label_args", "labels", "owner_gone", "reap"]


# -- a job's containers and network: at teardown, for kept jobs, and what a killed emulator left


def reap_jobs(*, owner: tuple[int, int] | None = None) -> list[str]:
    """Remove containers and networks of emulator jobs whose owning process is gone.

    Only resources labelled by this machine (``owner-host``) are considered. Before removal the
    dead job's writable bind mounts are chowned back to ``owner`` (default: this uid/gid).
    Returns the names of what was removed.
    """
    client = engine.client()
    owner = owner if owner is not None else (os.getuid(), os.getgid())
    dead = _owner_dead

    stale = [c for c in client.containers.list(all=True, ignore_removed=True, filters={"label": LABEL_JOB})
             if dead(c.labels)]
    networks = [n for n in client.networks.list(filters={"label": LABEL_JOB}) if dead(n.attrs.get("Labels") or {})]
    return remove(client, stale, networks, owner=owner)


def reap_scratch(scratch: Path, *, owner: tuple[int, int] | None = None) -> list[str]:
    """Remove the containers and networks of the job whose scratch tree is ``scratch`` (labelled
    :data:`LABEL_SCRATCH` with a folder below it) and whose owning process is gone: what a run
    killed before it wrote the kept record (or before its teardown) left. Returns the names removed."""
    client = engine.client()
    root = str(scratch).rstrip("/") + "/"

    def ours(lab: Mapping[str, str]) -> bool:
        if not (lab.get(LABEL_SCRATCH, "") + "/").startswith(root):
            return False
        start = lab.get(LABEL_OWNER_START) or ""
        pid = lab.get(LABEL_OWNER_PID, "")
        return not (pid.isdigit() and P.pid_alive(int(pid), int(start) if start.isdigit() else None))

    stale = [c for c in client.containers.list(all=True, ignore_removed=True, filters={"label": LABEL_SCRATCH})
             if ours(c.labels)]
    networks = [n for n in client.networks.list(filters={"label": LABEL_SCRATCH})
                if ours(n.attrs.get("Labels") or {})]
    return remove(client, stale, networks, owner=owner if owner is not None else (os.getuid(), os.getgid()))


def remove_job(container_names: Iterable[str], network: str, *, owner: tuple[int, int] | None = None) -> list[str]:
    """Remove a kept job's containers and network (see :mod:`emulator.kept.records`), whoever owns them;
    what is already gone is skipped. Returns the names of what was removed."""
    client = engine.client()
    errors = engine.sdk(".errors")
    containers, networks = [], []
    for name in container_names:
        try:
            containers.append(client.containers.get(name))
        except errors.NotFound:
            continue
    try:
        networks.append(client.networks.get(network))
    except errors.NotFound:
        pass
    return remove(client, containers, networks, owner=owner if owner is not None else (os.getuid(), os.getgid()))


def remove(client: Any, stale: Sequence[Any], networks: Sequence[Any], *, owner: tuple[int, int]) -> list[str]:
    """Kill ``stale`` containers, hand their writable bind mounts back to ``owner``, remove them and
    ``networks``. Returns the names of what was removed."""
    removed: list[str] = []
    by_image: dict[str, set[str]] = {}
    for c in stale:
        if c.labels.get(LABEL):
            continue
        if c.status in ("running", "paused", "restarting"):
            try:
                if c.status == "paused":
                    c.unpause()
                c.kill()
            except Exception:
                pass
        sources = {m["Source"] for m in c.attrs.get("Mounts", [])
                   if m.get("Type") == "bind" and m.get("RW")}
        image = c.attrs.get("Config", {}).get("Image") or DEFAULT_IMAGE
        by_image.setdefault(image, set()).update(sources)
    for image, sources in by_image.items():
        chown_mounts(client, image, sources, owner, {LABEL_JOB: "reap", **owner_labels()})
    for c in stale:
        remove_object(c)
        removed.append(c.name)
    for n in networks:
        remove_object(n)
        removed.append(n.name)
    return removed


def chown_mounts(client: Any, image: str, sources: Iterable[str], owner: tuple[int, int],
                  labels: Mapping[str, str]) -> None:
    """Give ``sources`` (folders written as root by containers) back to ``owner``.

    Runs ``chown -R`` in a short container (the invoking user may not be root), with each
    source bind-mounted at ``/mnt/N``. Best effort: a failure leaves root-owned files behind.
    """
    sources = sorted({s for s in sources if Path(s).exists()})
    if not sources or owner == (0, 0):
        return
    dmount = engine.sdk(".types").Mount
    mounts = [dmount(f"/mnt/{i}", s, type="bind") for i, s in enumerate(sources)]
    try:
        client.containers.run(
            image, entrypoint=["chown"],
            command=["-R", f"{owner[0]}:{owner[1]}", *(m["Target"] for m in mounts)],
            mounts=mounts, network_mode="none", remove=True, user="0",
            labels={**labels, LABEL: "chown"})
    except Exception:
        pass


def remove_object(obj: Any) -> None:
    """Remove a container (forcibly) or a network; ignore what is already gone."""
    try:
        if hasattr(obj, "disconnect"):
            obj.remove()
        else:
            obj.remove(force=True, v=True)
    except Exception:
        pass
