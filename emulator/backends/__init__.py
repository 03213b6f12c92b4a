"""Backends that run emulated hosts. Loaded lazily by name; see :mod:`.base`."""

from __future__ import annotations

import importlib

from ..errors import RequestError
from .base import Backend, HostHandle, HostLaunch, JobHandle, KeptHosts, LaunchSpec, Mount, Runtime

BACKENDS = {"process": "emulator.backends.process:ProcessBackend",
            "docker": "emulator.backends.docker:DockerBackend"}
#: The backend a job runs on unless it asks for another.
DEFAULT_BACKEND = "process"

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "Backend", "HostHandle", "HostLaunch", "JobHandle", "KeptHosts",
           "LaunchSpec", "Mount", "Runtime", "get_backend"]


def get_backend(name: str) -> Backend:
    """Return a backend instance by name, importing its module only now."""
    try:
        target = BACKENDS[name]
    except KeyError:
        raise RequestError("backend", f"unknown backend {name!r}", allowed=", ".join(BACKENDS)) from None
    module, _, cls = target.partition(":")
    backend: Backend = getattr(importlib.import_module(module), cls)()
    return backend
