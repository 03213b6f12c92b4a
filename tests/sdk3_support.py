"""Shared by the SDK v3 tests: an emulator session with the region the SDK's logs client needs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def emulator_session(s3_root: Path, **options: Any) -> Iterator[Any]:
    """An ``emulator.sdk.v3.EmulatorSession`` over ``s3_root``; ``AWS_DEFAULT_REGION`` is set while it
    is open (the SDK builds its CloudWatch Logs client from the default region)."""
    saved = os.environ.get("AWS_DEFAULT_REGION")
    os.environ["AWS_DEFAULT_REGION"] = "us-west-2"
    from emulator.sdk.v3 import EmulatorSession

    session = EmulatorSession(s3_root=s3_root, **options)
    try:
        yield session
    finally:
        session.close()
        if saved is None:
            os.environ.pop("AWS_DEFAULT_REGION", None)
        else:
            os.environ["AWS_DEFAULT_REGION"] = saved
