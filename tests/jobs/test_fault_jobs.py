"""Faults injected through the supervisor (``faults=`` / ``--fault``), end to end.

Detection bounds use the emulator's own timestamps (fault events and ``job.json``), never the
wall clock of the whole test.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import emulator
from emulator.backends.materialise import host_root
from emulator.job import request as rq
from emulator.job.result import JobResult
from emulator.supervisor import run as run_job

from .moments import JumpWhenSet, SetAfterMarker

SCRIPTS = Path(__file__).parents[1] / "scripts"
#: MaxRuntimeInSeconds of the frozen-host job: longer than any start, reached by JumpWhenSet a
#: little after algo-2 printed READY (the freeze's trigger), with no wall-clock wait for it.
FREEZE_MAX_RUN = 900
#: Longest wait for the hosts to start and record their connection attempt (a loaded machine).
HANG_WAIT = 600.0
#: Seconds the netcut test lets the hosts keep trying their exchange before it stops the job.
EXCHANGE_TRIES = 6.0


def _t(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_sigkill_of_a_host_fails_the_job_and_stops_its_peer(tmp_path: Path) -> None:
    result = emulator.run(entry_point="sleeper.py", source_dir=SCRIPTS, instance_count=2, output_path=tmp_path,
                          job_name="kill-host", echo=False, stop_grace=2, profile="ci",
                          faults=["kill:algo-2:SIGKILL@log=/READY/"])
    assert (result.status, result.secondary_status) == ("Failed", "Failed")
    assert result.first_failure == "algo-2"
    host = {h.name: h for h in result.hosts}
    assert host["algo-2"].exit_code == 137 and host["algo-2"].how == "signal SIGKILL"
    assert result.failure_reason == "AlgorithmError: Exit Code: 137"
    desc = result.description
    [event] = desc["Emulator"]["Faults"]
    assert event["Action"] == "signal SIGKILL" and event["Host"] == "algo-2"
    # the supervisor saw the dead host after the kill, then stopped algo-1 (its script sleeps
    # forever, so the job ending at all means it was stopped); how long each took is nox -s bench's
    detected = _t(desc["Emulator"]["FirstFailure"]["Time"])
    assert event["Wall"] <= detected <= _t(desc["TrainingEndTime"])
    assert host["algo-1"].exit_code != 0


def test_frozen_host_ends_at_max_runtime(tmp_path: Path) -> None:
    ready = threading.Event()
    request = rq.create(entry_point="sleeper.py", source_dir=SCRIPTS, instance_count=2, output_path=tmp_path,
                        job_name="freeze", max_run=FREEZE_MAX_RUN, profile="ci")
    result = run_job(request, stream=SetAfterMarker("[algo-2] READY", 1, ready), stop_grace=1,
                     faults=["freeze:algo-2@log=/READY/"], clock=JumpWhenSet(ready, FREEZE_MAX_RUN))
    assert (result.status, result.secondary_status) == ("Stopped", "MaxRuntimeExceeded")
    assert result.failure_reason is None
    statuses = [t["Status"] for t in result.description["SecondaryStatusTransitions"]]
    assert statuses[-3:] == ["Stopping", "Uploading", "MaxRuntimeExceeded"]
    actions = [e["Action"] for e in result.description["Emulator"]["Faults"]]
    assert "SIGSTOP" in actions[0], actions


def test_network_cut_host_hangs_its_peer(tmp_path: Path) -> None:
    """The fault table (``docs/guides/debugging.md``), ``netcut``: connections get no answer (no
    RST) and an exchange between the hosts hangs, so the job would run until MaxRuntime. Here a
    stop request ends it once both hosts are seen hanging: the deadline is a wall clock that a
    loaded machine may spend starting hosts (MaxRuntime itself is tested with a frozen host
    above)."""
    src = tmp_path / "src"
    src.mkdir()
    # What each host saw goes to /opt/ml/model (model.tar.gz is built for a stopped job too): the
    # toolkit re-prints a script's output in the chunks it reads, so a printed line may be split.
    (src / "talk.py").write_text(
        "import socket, threading, time\n"
        "me = socket.gethostname()\n"
        "peer = 'algo-1' if me == 'algo-2' else 'algo-2'\n"
        "def note(what):\n"
        "    with open(f'/opt/ml/model/{me}-{what}', 'w') as f:\n"
        "        f.write(what)\n"
        "server = socket.create_server(('', 7000))\n"
        "threading.Thread(target=server.accept, daemon=True).start()\n"
        "print('READY', flush=True)\n"
        "while True:\n"  # port 9 is closed: while the link is up, the peer refuses at once
        "    try:\n"
        "        socket.create_connection((peer, 9), timeout=2)\n"
        "    except ConnectionRefusedError:\n"
        "        time.sleep(0.5)\n"
        "    except OSError as e:\n"
        "        note('connect-' + type(e).__name__)\n"
        "        break\n"
        "while True:\n"  # then the exchange: reach the peer's listener, as a collective would
        "    try:\n"
        "        socket.create_connection((peer, 7000), timeout=2).close()\n"
        "        note('exchanged')\n"
        "        break\n"
        "    except OSError:\n"
        "        time.sleep(0.5)\n")
    request = rq.create(entry_point="talk.py", source_dir=src, instance_count=2, output_path=tmp_path / "o",
                        job_name="netcut")
    stop = threading.Event()
    box: dict[str, JobResult] = {}
    thread = threading.Thread(target=lambda: box.setdefault("r", run_job(
        request, echo=False, stop_grace=1, stop=stop, faults=["netcut:algo-2@log=/READY/"])))
    thread.start()
    try:
        models = [host_root(request.job_dir, h) / "model" for h in ("algo-1", "algo-2")]
        deadline = time.monotonic() + HANG_WAIT
        while not all(any(m.glob("*-connect-*")) for m in models) and thread.is_alive():
            assert time.monotonic() < deadline, "the hosts never recorded their connection attempt"
            time.sleep(0.2)
        time.sleep(EXCHANGE_TRIES)  # the exchange keeps failing meanwhile
    finally:
        stop.set()
        thread.join()
    result = box["r"]
    assert (result.status, result.secondary_status) == ("Stopped", "Stopped")
    assert result.failure_reason is None
    assert [h.name for h in result.hosts] == ["algo-1", "algo-2"]
    assert all(h.exit_code != 0 for h in result.hosts)  # still hanging when stopped
    assert [e["Action"] for e in result.description["Emulator"]["Faults"]] and all(
        e["Host"] == "algo-2" for e in result.description["Emulator"]["Faults"])
    # After the cut, the cut host has no link and its peer gets no answer (no RST: a timeout or an
    # unreachable network, never a refusal), and the exchange never gets through.
    seen = sorted(result.model_files())
    assert len(seen) == 2 and not [name for name in seen if "exchanged" in name], seen
    for host in ("algo-1", "algo-2"):
        [connect] = [name for name in seen if name.startswith(f"{host}-connect-")]
        assert connect.rsplit("-", 1)[1] in ("TimeoutError", "OSError"), seen


def test_spot_interruption_resumes_from_checkpoints(tmp_path: Path) -> None:
    plain = emulator.run(entry_point="checkpointed.py", source_dir=SCRIPTS, output_path=tmp_path / "a",
                         job_name="spot-baseline", echo=False, stop_grace=1, checkpoint_dir=tmp_path / "ck-a",
                         profile="ci")
    assert plain.status == "Completed"
    spot = emulator.run(entry_point="checkpointed.py", source_dir=SCRIPTS, output_path=tmp_path / "b",
                        job_name="spot", echo=False, stop_grace=1, checkpoint_dir=tmp_path / "ck-b", profile="ci",
                        faults=["spot@log=/step 5/"])
    assert (spot.status, spot.secondary_status) == ("Completed", "Completed")
    desc = spot.description
    assert desc["Emulator"]["SpotInterruptions"] == 1
    statuses = [t["Status"] for t in desc["SecondaryStatusTransitions"]]
    assert statuses == ["Starting", "Downloading", "Training", "Interrupted", "Starting", "Downloading",
                        "Training", "Uploading", "Completed"]
    log = spot.log("algo-1")
    resumed = re.findall(r"resumed from step (\d+)", log)  # not per line: see tests/rank_output.py
    assert len(resumed) == 1
    loaded = int(resumed[0])
    assert loaded >= 5  # the checkpoint restored into /opt/ml/checkpoints was the last one written
    assert json.loads(spot.model_files()["final.json"]) == json.loads(plain.model_files()["final.json"]) == {
        "steps": 12}
    assert json.loads((tmp_path / "ck-b" / "state.json").read_text()) == {"step": 12}
    assert desc["BillableTimeInSeconds"] <= desc["TrainingTimeInSeconds"]


def test_cli_fault_flag_and_bad_fault_is_a_request_error(tmp_path: Path) -> None:
    bad = subprocess.run([sys.executable, "-m", "emulator", "run", "--entry-point", "sleeper.py", "--source-dir",
                          str(SCRIPTS), "--output-dir", str(tmp_path), "--fault", "kill:algo-7"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--fault" in bad.stderr and "algo-7" in bad.stderr
    assert not any(tmp_path.iterdir())  # nothing was written, no host started


def test_pytest_fixture_takes_faults(sagemaker_job) -> None:  # type: ignore[no-untyped-def]
    result = sagemaker_job(entry_point="sleeper.py", source_dir=SCRIPTS, stop_grace=1,
                           faults=["kill:algo-1:SIGKILL@log=/READY/"])
    assert (result.status, result.first_failure) == ("Failed", "algo-1")
    assert result.failure_reason == "AlgorithmError: Exit Code: 137"
