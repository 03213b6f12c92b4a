"""Opt-in deviation: shorten the toolkit's fixed MPI-family sleeps (``EMULATOR_SHORT_TOOLKIT_SLEEPS=1``).

sagemaker-training's MPI and SMDataParallel runners sleep 30 s by design after ``mpirun`` (the
master after writing the status files, workers after ``orted`` exits, then poll every 30 s).
With this switch every ``time.sleep`` in those two toolkit modules is capped at one second. Off by
default; never use it for comparisons with real jobs. The job records it under
``Emulator.Deviations`` in ``job.json``.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import _sm_emulator_patches as patches

CAP_SECONDS = 1.0


class _ShortSleepTime:
    """``time`` as the toolkit module sees it, with ``sleep`` capped."""

    def __init__(self, original: Any) -> None:
        self._original = original

    def __getattr__(self, name: str) -> object:
        return getattr(self._original, name)

    def sleep(self, seconds: float) -> None:
        self._original.sleep(min(seconds, CAP_SECONDS))


def patch(module: ModuleType) -> None:
    if isinstance(getattr(module, "time", None), _ShortSleepTime):
        return
    if patches.wrap("short-sleeps", module, "time", _ShortSleepTime):
        print(f"[emulator] {module.__name__}: toolkit sleeps capped at {CAP_SECONDS:g} s "
              "(--short-toolkit-sleeps, a deviation from SageMaker)", file=sys.stderr, flush=True)
