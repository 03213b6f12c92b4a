"""Kept hosts of the docker backend, and what killed runs of it left (see :mod:`emulator.kept.records`).

A kept job's containers (running ones frozen with SIGSTOP, exited ones as they ended) and its
network stay after the emulator exits; the kept record names them. Entering a host is ``docker
exec`` (the container's environment, user and working folder); its processes are the
container's (``docker top``), as PIDs of this machine when the engine runs here; removing the job
kills and removes the containers and the network, after handing root-written files in writable
bind mounts back (:func:`~.reaper.remove`), as teardown would have.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...errors import RequestError
from ...inhost import protocol as P
from . import engine, reaper


class DockerKeptHosts:
    """The kept hosts a docker-backend ``kept.json`` describes (see :class:`~.base.KeptHosts`)."""

    def __init__(self, record: Mapping[str, Any]) -> None:
        self.record = record
        self.hosts: dict[str, dict[str, Any]] = dict(record.get("hosts", {}))

    def _container(self, host: str) -> str:
        return str(self.hosts[host]["container"])

    def gone(self, host: str) -> str | None:
        try:
            status = str(engine.client().containers.get(self._container(host)).status)
        except Exception as exc:  # removed, or no engine
            status = f"not found ({type(exc).__name__})"
        if status != "running":
            return f"{host} has exited since it was kept (container {self._container(host)}: {status})"
        return None

    def exec_argv(self, host: str, command: Sequence[str], *, terminal: bool,
                  env: Mapping[str, str] | None) -> tuple[list[str], dict[str, str]]:
        client = shutil.which("docker")
        if client is None:
            raise RequestError("HOST", f"entering {host} needs the docker command line client on PATH")
        return [client, "exec", "-i", *(["-t"] if terminal else []), self._container(host), *command], \
            dict(os.environ)

    def pids(self, host: str) -> list[int]:
        pids = engine.container_pids(engine.client().containers.get(self._container(host)))  # `docker top`
        if pids and not P.proc_nspids(pids[0]):
            raise RequestError("HOST", f"the processes of {host} are not visible here (the docker engine runs on "
                               f"another machine); use: python -m emulator shell {self.record.get('job_dir')} "
                               f"{host} -- ps -ef")
        return pids

    def remove(self) -> list[str]:
        owner = self.record.get("owner")
        names = reaper.remove_job(dict(self.record.get("containers", {})).values(), str(self.record.get("network")),
                                  owner=(int(owner[0]), int(owner[1])) if owner else None)
        return [f"removed {', '.join(names)}"] if names else []


def reap_leftovers(scratch: Path, *, job_name: str) -> list[str]:
    """Remove the containers and network of a run of ``job_name`` whose emulator is gone, found by
    their scratch label (:func:`~.reaper.reap_scratch`)."""
    try:
        names = reaper.reap_scratch(scratch)
    except Exception as exc:  # no docker SDK or engine here: say so; the caller removes the rest
        return [f"docker: containers of {job_name} not reaped ({exc})"]
    return [f"removed {', '.join(names)}"] if names else []


def reap_orphans() -> list[str]:
    """Containers and networks of jobs whose emulator is gone (:func:`~.reaper.reap_jobs`), and helper
    containers (wheelhouse, image probe, image build) whose owner is gone
    (:func:`emulator.backends.docker.reaper.reap`)."""
    lines: list[str] = []
    try:
        lines += reaper.reap_jobs()
        lines += reaper.reap(engine.client())
    except Exception as exc:  # no engine here: nothing of docker to reap
        lines.append(f"docker: not reaped ({exc})")
    return lines
