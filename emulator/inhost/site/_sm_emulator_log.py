"""``[emulator]`` messages on stderr, each message key at most once per process (= per rank)."""

from __future__ import annotations

import os
import sys

_SEEN: set[str] = set()


def rank_label() -> str:
    """The rank as far as the environment tells it (torchrun, smddprun or Open MPI), else ``?``."""
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        if name in os.environ:
            return os.environ[name]
    return "?"


def log(message: str) -> None:
    """Write ``[emulator] rank R: message`` to stderr."""
    print(f"[emulator] rank {rank_label()}: {message}", file=sys.stderr, flush=True)


def log_once(key: str, message: str) -> None:
    """Like :func:`log`, but only the first time ``key`` is seen in this process."""
    if key in _SEEN:
        return
    _SEEN.add(key)
    log(message)
