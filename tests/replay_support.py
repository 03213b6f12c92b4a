"""Shared by the replay tests that record a job in moto (tests/jobs/test_replay_moto.py for SDK v2,
tests/jobs/test_sdk3_replay.py for v3): run ``python -m emulator replay`` in this process, where
moto answers boto3, and read the replayed job's description."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

from emulator.cli import main


def replay_in_process(argv: list[str]) -> tuple[int, str]:
    """``python -m emulator replay ARGV`` in this process; its exit code and its stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["replay", *argv])
    return code, out.getvalue() + err.getvalue()


def replayed_job(root: Path) -> dict[str, Any] | None:
    """The ``job.json`` of the one replay under ``root`` (``None`` unless there is exactly one)."""
    jobs = list(root.glob("*-replay-*/job.json"))
    return json.loads(jobs[0].read_text()) if len(jobs) == 1 else None
