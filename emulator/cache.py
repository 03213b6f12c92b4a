"""Where the emulator keeps what it builds on this machine: ``$XDG_CACHE_HOME/sagemaker-emulator``
(default ``~/.cache/sagemaker-emulator``). Job environments, DLC views, wheelhouses, image-build
logs, the backend probe and the SDK sessions' local S3 live in folders below it.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """``$XDG_CACHE_HOME/sagemaker-emulator/<parts>`` (``~/.cache`` when the variable is unset or empty)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "sagemaker-emulator", *parts)
