"""Toolkit speed-ups of the ``ci`` profile (recorded deviations; only time changes).

- ``EMULATOR_SHORT_TOOLKIT_SLEEPS=1``: sagemaker-training's MPI and SMDataParallel runners sleep
  30 s by design after ``mpirun`` (the master after writing the status files, workers after
  ``orted`` exits, then poll every 30 s) and poll for each other's ``sshd`` and for ``orted``
  every second. In those two toolkit modules a ``time.sleep`` of more than a second (the waits)
  is capped at 1 s and one of up to a second (the polls) at 0.2 s: the polls still poll, only
  faster, so a job whose hosts are slow to come up waits as long. The waits keep 1 s: the worker's
  first look for the status file comes 1 s after ``orted`` exits, by when the master's ``ssh
  touch`` has written it, and the master stays up 1 s after writing it, as the worker's poll of
  the master's ``sshd`` expects.
- ``EMULATOR_TOOLKIT_SKIPS_TORCH_IMPORT=1``: sagemaker-pytorch-training's ``train()`` imports
  torch in the toolkit process only to set ``SM_DLC_TORCH_VERSION`` to ``torch.__version__``
  before it starts the user's processes (about 3 s of CPU per host). The toolkit then reads the
  same string from the ``__version__`` assignment of the installed ``torch/version.py`` (what
  ``torch.__version__`` is made from) without importing torch. Where torch is not installed, or its
  ``version.py`` has no literal ``__version__``, the toolkit's own function runs unchanged. Not
  emulated: a torch that is installed but fails to import leaves ``SM_DLC_TORCH_VERSION`` unset
  (and logs a warning) on SageMaker, set here — the rank's own ``import torch`` fails either way.

Neither is on by default; never use them for timing comparisons with real jobs. A job records
them under ``Emulator.Deviations`` in ``job.json``.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import _sm_emulator_patches as patches

#: Caps of the toolkit's waits (sleeps over 1 s) and of its polls (sleeps up to 1 s).
WAIT_CAP_SECONDS = 1.0
POLL_CAP_SECONDS = 0.2
#: What sagemaker-pytorch-training's ``_set_torch_version_environment`` sets.
TORCH_VERSION_VAR = "SM_DLC_TORCH_VERSION"


class _ShortSleepTime:
    """``time`` as the toolkit module sees it, with ``sleep`` capped."""

    def __init__(self, original: Any) -> None:
        self._original = original

    def __getattr__(self, name: str) -> object:
        return getattr(self._original, name)

    def sleep(self, seconds: float) -> None:
        self._original.sleep(min(seconds, WAIT_CAP_SECONDS if seconds > 1 else POLL_CAP_SECONDS))


def patch(module: ModuleType) -> None:
    if isinstance(getattr(module, "time", None), _ShortSleepTime):
        return
    if patches.wrap("short-sleeps", module, "time", _ShortSleepTime):
        print(f"[emulator] {module.__name__}: toolkit sleeps capped at {WAIT_CAP_SECONDS:g} s, its polls at "
              f"{POLL_CAP_SECONDS:g} s (--short-toolkit-sleeps, a deviation from SageMaker)", file=sys.stderr,
              flush=True)


def torch_version_from_file() -> str | None:
    """``torch.__version__`` of the installed torch, read from ``torch/version.py`` without
    importing torch; None when torch is not installed or the file has no literal ``__version__``."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    for folder in locations:
        try:
            tree = ast.parse((Path(folder) / "version.py").read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            target = node.target if isinstance(node, ast.AnnAssign) else (
                node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
            value = getattr(node, "value", None)
            if (isinstance(target, ast.Name) and target.id == "__version__" and isinstance(value, ast.Constant)
                    and isinstance(value.value, str)):
                return value.value
    return None


def _without_torch_import(original: Callable[[], None]) -> Callable[[], None]:
    @functools.wraps(original)
    def _set_torch_version_environment() -> None:
        version = torch_version_from_file()
        if version is None:
            original()  # not installed, or an unusual version.py: the toolkit's own way
        else:
            os.environ[TORCH_VERSION_VAR] = version

    return _set_torch_version_environment


def patch_training(module: ModuleType) -> None:
    """sagemaker-pytorch-training's ``training`` module: its torch version without importing torch."""
    patches.wrap("toolkit-torch-version", module, "_set_torch_version_environment", _without_torch_import)
