"""Backends that run emulated hosts. Loaded lazily by name; see :mod:`.base`."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

from ..errors import RequestError
from .base import AUTO, Backend, HostHandle, HostLaunch, JobHandle, KeptHosts, LaunchSpec, Mount, Runtime, World

#: The backends by name; ``auto`` (the default everywhere) picks one of them (:mod:`.choose`).
BACKENDS = {"process": "emulator.backends.process.backend:ProcessBackend",
            "docker": "emulator.backends.docker.backend:DockerBackend"}
#: The backend a job runs on unless it asks for another.
DEFAULT_BACKEND = AUTO

__all__ = ["AUTO", "BACKENDS", "DEFAULT_BACKEND", "Backend", "HostHandle", "HostLaunch", "JobHandle", "KeptHosts",
           "LaunchSpec", "Mount", "Runtime", "World", "get_backend", "run_tool"]


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


#: The commands with their own modules, by name: ``module`` (its ``main(argv) -> int``) or
#: ``module:function`` (loaded by name, so ``replay``, which uses the CLI's ``plan_document``, is no
#: import of the CLI's). ``plan`` is ``plan SOURCE …`` only: ``replay --plan``'s code path.
TOOLS = {"doctor": "emulator.backends.doctor", "cache": "emulator.backends.store", "replay": "emulator.replay.command",
         "plan": "emulator.replay.command:plan"}


def run_tool(name: str, argv: Sequence[str] = ()) -> int:
    """``python -m emulator doctor|cache|replay|plan SOURCE …`` (:data:`TOOLS`), loaded by name as the
    backends are: which backends can run here (:mod:`.doctor`), what the emulator keeps here
    (:mod:`.store`), and a recorded job run again or planned (:mod:`emulator.replay.command`)."""
    module, _, function = TOOLS[name].partition(":")
    main: Callable[[Sequence[str]], int] = getattr(importlib.import_module(module), function or "main")
    return main(argv)
