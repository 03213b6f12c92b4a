"""Backends that run emulated hosts. Loaded lazily by name; see :mod:`.base`."""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from ..errors import RequestError
from .base import AUTO, Backend, HostHandle, HostLaunch, JobHandle, KeptHosts, LaunchSpec, Mount, Runtime, World

#: The backends by name; ``auto`` (the default everywhere) picks one of them (:mod:`.choose`).
BACKENDS = {"process": "emulator.backends.process.backend:ProcessBackend",
            "docker": "emulator.backends.docker.backend:DockerBackend"}
#: The backend a job runs on unless it asks for another.
DEFAULT_BACKEND = AUTO

__all__ = ["AUTO", "BACKENDS", "DEFAULT_BACKEND", "Backend", "HostHandle", "HostLaunch", "JobHandle", "KeptHosts",
           "LaunchSpec", "Mount", "Runtime", "World", "get_backend", "run_doctor"]


def get_backend(name: str) -> Backend:
    """Return a backend instance by name (``auto``: the one :mod:`.choose` picks here), importing
    its module only now. The instance's ``choice`` says which was chosen and why."""
    from .choose import choose

    if name != AUTO and name not in BACKENDS:
        raise RequestError("backend", f"unknown backend {name!r}", allowed=", ".join([AUTO, *BACKENDS]))
    choice = choose(name)
    module, _, cls = BACKENDS[choice.backend].partition(":")
    backend: Backend = getattr(importlib.import_module(module), cls)()
    backend.choice = choice  # type: ignore[attr-defined]  # read by choose.describe (job.json)
    return backend


def run_doctor(argv: Sequence[str] = ()) -> int:
    """``python -m emulator doctor [--json]``: which backends can run here, by the probes a job's
    start uses (:mod:`.doctor`); the exit code is 0 iff at least one can."""
    from .doctor import main

    return main(argv)
