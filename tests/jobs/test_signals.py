"""SIGTERM to the emulator (how CI runners and `timeout` cancel a job) is handled like Ctrl-C:
hosts stopped, ``job.json`` written with ``Stopped``, temp tree removed."""

from __future__ import annotations

import json
import signal
import subprocess
import tempfile
from pathlib import Path

from ..conftest import our_processes
from .test_hygiene import _start, job_processes


def test_sigterm_stops_the_job_writes_job_json_and_cleans_up(tmp_path: Path) -> None:
    proc, job, out = _start(tmp_path)
    assert job_processes(job)  # positive control: the hosts run
    proc.send_signal(signal.SIGTERM)
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 128 + signal.SIGTERM, (stdout, stderr)
    assert "terminated (SIGTERM)" in stderr
    assert not job_processes(job)
    assert not our_processes()
    d = json.loads((out / job / "job.json").read_text())
    assert (d["TrainingJobStatus"], d["SecondaryStatus"]) == ("Stopped", "Stopped")
    statuses = [t["Status"] for t in d["SecondaryStatusTransitions"]]
    assert "Stopping" in statuses and statuses[-1] == "Stopped", statuses
    assert len(d["Emulator"]["Hosts"]) == 2, d["Emulator"]["Hosts"]  # _start's 2 hosts
    assert {h["How"] for h in d["Emulator"]["Hosts"]} <= {"signal SIGTERM", "signal SIGKILL"}
    assert not list(Path(tempfile.gettempdir()).glob(f"sm-emulator-{job[:20]}-*"))
