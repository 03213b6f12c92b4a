"""Where every rank was when a job was stopped, end to end: real toolkit, torchrun/mpirun, both
backends. Expected places come from the script's own text (the lines holding its markers)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import emulator
from emulator import supervisor
from emulator.job.profiles import EXACT
from emulator.job.request import create
from emulator.job.result import JobResult

from ..conftest import require_mpi
from .moments import JumpWhenSet, SetAfterMarker

SCRIPTS = Path(__file__).parents[1] / "scripts"
HANG = (SCRIPTS / "hang_reader.py").read_text()
BASE: dict[str, Any] = dict(source_dir=SCRIPTS, instance_count=2, instance_type="ml.p4d.24xlarge", gpus_per_host=2)
TORCH_DIST = {"torch_distributed": {"enabled": True}}
SMDDP = {"smdistributed": {"dataparallel": {"enabled": True}}}


def line(text: str, marker: str) -> int:
    return next(i for i, t in enumerate(text.splitlines(), 1) if marker in t)


STEP = f"all_reduce at hang_reader.py:{line(HANG, '# STEP')} in step"
READER = f"hang_reader.py:{line(HANG, '# READER')} in load_batch"


def run_until_warm(tmp_path: Path, name: str, *, backend: str = "process", **kwargs: Any) -> tuple[JobResult, str]:
    """Run a job and stop it (StopTrainingJob) once its four ranks are warm; returns the console too."""
    stop = threading.Event()
    stream = SetAfterMarker("WARM rank", 4, stop)
    request = create(output_path=tmp_path, job_name=name, max_run=900, profile="ci", **BASE, **kwargs)
    result = supervisor.run(request, backend=backend, stream=stream, stop_grace=2, stop=stop)
    return result, stream.getvalue()


def summary(result: JobResult) -> list[str]:
    return list(result.description["Emulator"]["Stacks"]["Summary"])


#: The max-runtime job's MaxRuntimeInSeconds: longer than any warm-up, reached by JumpWhenSet.
MAX_RUN = 900


@pytest.fixture(scope="module")
def max_runtime_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[JobResult, str]:
    """hang_reader.py until MaxRuntimeInSeconds, reached a little after all four ranks are warm."""
    warm = threading.Event()
    stream = SetAfterMarker("WARM rank", 4, warm)
    request = create(output_path=tmp_path_factory.mktemp("hang"), job_name="hang-max-runtime", max_run=MAX_RUN,
                     entry_point="hang_reader.py", distribution=TORCH_DIST, profile=EXACT, **BASE)
    result = supervisor.run(request, stream=stream, stop_grace=2, clock=JumpWhenSet(warm, MAX_RUN))
    return result, stream.getvalue()


def test_max_runtime_reports_where_each_rank_was(max_runtime_job: tuple[JobResult, str]) -> None:
    result, console = max_runtime_job
    assert (result.status, result.secondary_status) == ("Stopped", "MaxRuntimeExceeded")
    expected = [f"ranks 0-2 (algo-1, algo-2): {STEP}", f"rank 3 (algo-2): {READER}"]
    assert summary(result) == expected
    stacks = json.loads((result.job_dir / "job.json").read_text())["Emulator"]["Stacks"]
    assert stacks["Reason"] == "max-runtime" and stacks["Mechanisms"] == ["faulthandler"]
    assert [(r["Rank"], r["Host"], r["Call"]) for r in stacks["Ranks"]] == [
        (0, "algo-1", "all_reduce"), (1, "algo-1", "all_reduce"), (2, "algo-2", "all_reduce"), (3, "algo-2", None)]
    assert "where each rank was at the stop (max-runtime):" in console
    for text in expected:
        assert f"    {text}\n" in console
    # full stacks: a file per host, and the same text appended to the host's log
    algo2 = (result.job_dir / "stacks" / "algo-2.txt").read_text()
    assert 'File "/opt/ml/code/hang_reader.py", line' in algo2 and "in load_batch" in algo2
    assert algo2 in result.log("algo-2")
    # the ranks' collective records say the same: rank 3 never reached the second all_reduce
    (missing,) = [d for d in result.diagnostics if d.kind == "collective-missing"]
    assert missing.message.startswith("rank 3 (algo-2) never reached collective #2 of the default group (all_reduce, "
                                      "issued by ranks 0-2 at hang_reader.py:")
    _check_timeline_of_the_stopped_job(result, console)  # one job for both (the same stop)


@pytest.mark.docker


def test_docker_backend_reports_where_each_rank_was(tmp_path: Path, docker_ready: None) -> None:
    result, _ = run_until_warm(tmp_path, "hang-docker", backend="docker", entry_point="hang_reader.py",
                                     distribution=TORCH_DIST)
    assert (result.status, result.secondary_status) == ("Stopped", "Stopped")
    assert summary(result) == [f"ranks 0-2 (algo-1, algo-2): {STEP}", f"rank 3 (algo-2): {READER}"]
    assert result.description["Emulator"]["Stacks"]["Reason"] == "stop-request"


def test_mpirun_ranks_under_smddp(tmp_path: Path) -> None:
    """smdistributed dataparallel: the toolkit's mpirun + smddprun start the ranks; the smddp stand-in."""
    require_mpi()
    result, _ = run_until_warm(tmp_path, "hang-mpi", entry_point="hang_reader.py", distribution=SMDDP,
                               hyperparameters={"backend": "smddp"}, short_toolkit_sleeps=True)
    assert result.status == "Stopped"
    assert summary(result) == [f"ranks 0-2 (algo-1, algo-2): {STEP}", f"rank 3 (algo-2): {READER}"]


def test_a_job_that_is_not_stopped_captures_nothing(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.py").write_text("print('fine')\n")
    result = emulator.run(entry_point="ok.py", source_dir=src, output_path=tmp_path, job_name="no-stop", echo=False)
    assert result.status == "Completed"
    assert "Stacks" not in result.description["Emulator"] and not (result.job_dir / "stacks").exists()


def _check_timeline_of_the_stopped_job(result: JobResult, console: str) -> None:
    data = json.loads((result.job_dir / "timeline.json").read_text())
    kinds: dict[str, list[dict[str, Any]]] = {}
    for event in data["Events"]:
        kinds.setdefault(event["Kind"], []).append(event)
    assert sorted(e["Host"] for e in kinds["host-start"]) == ["algo-1", "algo-2"]
    assert sorted(e["Host"] for e in kinds["toolkit-start"]) == ["algo-1", "algo-2"]
    assert sorted(e["Host"] for e in kinds["launcher"]) == ["algo-1", "algo-2"]
    assert sorted(e["Rank"] for e in kinds["rank-start"]) == [0, 1, 2, 3]
    assert sorted(e["Rank"] for e in kinds["process-group"]) == [0, 1, 2, 3]
    assert [e["Detail"] for e in kinds["stop"]] == ["max-runtime"]
    # the order of a job's life: host start, toolkit, launcher, rank start, process group, stop
    first = {k: min(e["Time"] for e in v) for k, v in kinds.items()}
    assert first["host-start"] <= first["toolkit-start"] <= first["launcher"] <= first["rank-start"] \
        <= first["process-group"] <= first["stop"]
    totals = {s["Rank"]: s["Total"] for s in data["Collectives"]["Series"]}
    assert totals == {0: 2, 1: 2, 2: 2, 3: 1}  # rank 3 never issued its second all_reduce
    png = result.job_dir / "timeline.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"timeline: {png}" in console
    png.unlink()
    redraw = subprocess.run([sys.executable, "-m", "emulator", "timeline", str(result.job_dir)],
                            capture_output=True, text=True, check=False)
    assert (redraw.returncode, redraw.stdout.strip()) == (0, str(png)) and png.exists()
