"""Short-lived helper containers the emulator starts outside any job, and reaping them.

Three kinds, each labelled ``sagemaker-emulator.helper=<kind>``: ``wheelhouse`` (resolving a
job's ``requirements.txt`` for its image, :mod:`emulator.backends.docker.wheelhouse`), ``probe`` (reading which
torch, Python and toolkits an image holds, :mod:`emulator.backends.docker.images`) and ``build`` (the resolve step
of ``docker/build.py --framework``). All run with ``--rm`` and are removed by their owner in a
``finally``; what a killed owner leaves running is removed by ``python -m emulator reap``.

The ``wheelhouse`` and ``probe`` helpers carry the owner labels job containers carry
(``owner-pid``/``owner-start``/``owner-host``). ``build`` helpers carry none (``docker/build.py``
is an input of every image's hash, so it is not changed for this); their name,
``sm-emulator-resolve-<pid of build.py>``, says who owns them: the owner is gone when that pid
does not exist or started after the container was created.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ...inhost import protocol as P
from .backend import LABEL_HELPER as LABEL
from .backend import LABEL_OWNER_HOST, LABEL_OWNER_PID, LABEL_OWNER_START, owner_labels

#: The name docker/build.py gives its resolve helper.
BUILD_NAME = re.compile(r"^/?sm-emulator-resolve-(?P<pid>\d+)$")


def labels(kind: str) -> dict[str, str]:
    """The labels of a helper container of ``kind`` owned by this process."""
    return {LABEL: kind, **owner_labels()}


def label_args(kind: str) -> list[str]:
    """``labels(kind)`` as ``docker run`` arguments."""
    return [a for k, v in labels(kind).items() for a in ("--label", f"{k}={v}")]


def _started_at(pid: int) -> float | None:
    """Wall-clock start of ``pid`` (None when it is gone)."""
    stat = P.proc_stat(pid)
    if stat is None:
        return None
    try:
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    except (OSError, StopIteration, ValueError):
        return None
    return boot + stat.start_time / os.sysconf("SC_CLK_TCK")


def _created(attrs: Mapping[str, Any]) -> float:
    """A container's creation time (``Created``: RFC 3339 with nanoseconds) as epoch seconds."""
    text = str(attrs.get("Created", ""))
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?", text)
    if not m:
        return time.time()
    zone = "+00:00" if m.group(3) in (None, "Z") else m.group(3)
    stamp = datetime.fromisoformat(m.group(1) + zone).timestamp()
    return stamp + float("0." + (m.group(2) or "0"))


def owner_gone(name: str, labels_: Mapping[str, str], attrs: Mapping[str, Any]) -> bool:
    """Whether the process that started helper container ``name`` no longer exists."""
    if LABEL_OWNER_PID in labels_:
        if labels_.get(LABEL_OWNER_HOST) != socket.gethostname():
            return False
        try:
            pid = int(labels_[LABEL_OWNER_PID])
        except ValueError:
            return True
        start = labels_.get(LABEL_OWNER_START) or ""
        return not P.pid_alive(pid, int(start) if start.isdigit() else None)
    m = BUILD_NAME.match(name)
    if m is None:
        return False  # not ours to judge
    started = _started_at(int(m["pid"]))
    return started is None or started > _created(attrs) + 1.0


def reap(client: Any) -> list[str]:
    """Remove helper containers whose owner is gone; their names, one line each."""
    out = []
    for c in client.containers.list(all=True, filters={"label": LABEL}):
        if not owner_gone(c.name, c.labels, c.attrs):
            continue
        try:
            c.remove(force=True, v=True)
        except Exception:
            continue
        out.append(f"removed helper container {c.name} ({c.labels.get(LABEL)}; owner gone)")
    return out


__all__ = ["LABEL", "label_args", "labels", "owner_gone", "reap"]
