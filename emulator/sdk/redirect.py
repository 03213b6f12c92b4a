"""What the launch redirects of both SDK majors share (:mod:`emulator.sdk.launch` for v2,
:mod:`emulator.sdk.v3.launch` for v3): the variables that steer the launched jobs, and patching
every binding of a name in the loaded ``sagemaker.*`` modules for the length of a block.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

#: Variables that steer the launched jobs (read by both SDK majors' redirects).
BACKEND_VAR = "SAGEMAKER_EMULATOR_BACKEND"
GPUS_VAR = "SAGEMAKER_EMULATOR_GPUS_PER_HOST"
#: ``current``: run every job with today's torch whatever framework its image names (read by the
#: emulator's SageMaker client, see :class:`emulator.sdk.client.EmulatorSageMakerClient`).
FRAMEWORK_VAR = "SAGEMAKER_EMULATOR_FRAMEWORK_VERSION"


def emulator_options() -> dict[str, Any]:
    """Backend, GPUs per host and profile for the launcher's jobs, from the environment (an unknown
    profile name raises :class:`~emulator.errors.RequestError`)."""
    from ..job.profiles import from_environment

    options: dict[str, Any] = {"backend": os.environ.get(BACKEND_VAR, "auto"), "profile": from_environment()}
    gpus = os.environ.get(GPUS_VAR)
    if gpus:
        options["gpus_per_host"] = int(gpus)
    return options


def import_all(names: Sequence[str]) -> None:
    """Import the SDK modules that bind names at import, so patching reaches their bindings."""
    import importlib

    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


@contextmanager
def patched_sdk(replace: Callable[[str, Any], Any], *, skip: Sequence[Any] = ()) -> Iterator[None]:
    """Within the block, every attribute of every loaded ``sagemaker.*`` module (but ``skip``) for
    which ``replace(attr, value)`` returns something else is that; the default S3 store is open and
    flushed to its folder at the end."""
    from .s3 import default_store

    saved: list[tuple[Any, str, Any]] = []
    for name, module in list(sys.modules.items()):
        if module is None or module in skip or not (name == "sagemaker" or name.startswith("sagemaker.")):
            continue
        for attr, value in list(vars(module).items()):
            new = replace(attr, value)
            if new is not value:
                saved.append((module, attr, value))
                setattr(module, attr, new)
    store = default_store()
    try:
        yield
    finally:
        for module, attr, value in saved:
            setattr(module, attr, value)
        store.flush()
