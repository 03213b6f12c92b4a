"""``python -m emulator reap``: remove what emulator runs that are gone left behind.

Process backend: a job's hosts live in namespaces whose PID 1 (the namespace agent) exits when its
emulator does, so no process can be left; what can remain is a killed run's ``hosts/`` trees and
temporary folders, removed here when their owner process is gone. Docker backend: containers and
networks labelled by an emulator process that no longer exists (see
:func:`emulator.backends.docker.reap`), and helper containers (wheelhouse, image probe, image
build) whose owner is gone (:func:`emulator.helpers.reap`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_temp() -> list[str]:
    """Remove ``sm-emulator-*`` temp folders whose ``owner`` file names a dead process."""
    out = []
    for path in Path(tempfile.gettempdir()).glob("sm-emulator-*"):
        owner = path / "owner"
        try:
            pid = int(owner.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if not _pid_alive(pid):
            shutil.rmtree(path, ignore_errors=True)
            out.append(f"removed {path} (owner pid {pid} is gone)")
    return out


def reap() -> list[str]:
    """Everything ``reap`` removed, one line each."""
    lines = reap_temp()
    try:
        from .backends import docker as docker_backend
    except ImportError:
        return lines
    reaper = getattr(docker_backend, "reap", None)
    if reaper is not None:
        try:
            lines += list(reaper())
            from . import helpers  # wheelhouse, probe and image-build helper containers

            lines += helpers.reap(docker_backend._client())
        except Exception as exc:  # no engine here: nothing of docker to reap
            lines.append(f"docker: not reaped ({exc})")
    return lines
