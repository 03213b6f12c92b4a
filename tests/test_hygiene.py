"""Nothing of a job outlives its emulator: SIGKILL and SIGINT of ``python -m emulator run``.

Plus positive controls for the leak detectors of ``conftest.py`` (they must be able to fail).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from emulator.inhost.protocol import proc_environ, proc_stat

from .conftest import docker_leftovers, listening_sockets, our_processes

#: How long the job's processes may take to vanish after the emulator died.
VANISH_TIMEOUT = 10.0
START_TIMEOUT = 90.0

SLEEPER = """\
import os, socket, time
print("READY", socket.gethostname(), os.getpid(), flush=True)
time.sleep(300)
"""


def job_processes(job_name: str) -> dict[int, str]:
    """Live processes of this machine whose environment names the job (any namespace)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = proc_stat(int(entry))
        if stat is not None and stat.state not in ("Z", "X") and \
                proc_environ(stat.pid).get("TRAINING_JOB_NAME") == job_name:
            out[stat.pid] = stat.state
    return out


def _wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.1)


def _start(tmp_path: Path, hosts: int = 2) -> tuple[subprocess.Popen[str], str, Path]:
    src = tmp_path / "src"
    src.mkdir()
    (src / "sleeper.py").write_text(SLEEPER)
    job = f"qa-sig-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "emulator", "run", "--entry-point", "sleeper.py", "--source-dir",
         str(src), "--hosts", str(hosts), "--output-dir", str(out), "--job-name", job,
         "--quiet", "--stop-grace", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    logs = out / job / "logs"

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"emulator exited early ({proc.returncode}): {proc.communicate()}")
        return all((logs / f"algo-{i}.log").exists() and
                   "READY" in (logs / f"algo-{i}.log").read_text(errors="replace")
                   for i in range(1, hosts + 1))

    _wait_for(ready, START_TIMEOUT, "every host to print READY")
    return proc, job, out


def test_sigkill_of_the_emulator_leaves_no_process(tmp_path: Path) -> None:
    proc, job, out = _start(tmp_path)
    running = job_processes(job)
    # Positive control: the hosts' processes are visible by their job name before the kill.
    assert len(running) >= 2, running
    proc.kill()
    proc.wait(timeout=10)
    _wait_for(lambda: not job_processes(job), VANISH_TIMEOUT,
              f"the processes of {job} to die after SIGKILL of the emulator")
    # The namespace agent and unshare carry this test run's owner variable: gone as well.
    _wait_for(lambda: not our_processes(), VANISH_TIMEOUT, "the namespace agent to exit")
    # What a killed emulator cannot clean up is its scratch tree; `reap` removes it.
    from emulator.kept.reap import reap_temp

    removed = reap_temp()
    assert any(job[:20] in line for line in removed), removed
    assert not (out / job / "job.json").exists()  # it never got to describe the job


def test_sigint_stops_the_job_exit_130_and_cleans_up(tmp_path: Path) -> None:
    proc, job, out = _start(tmp_path)
    assert job_processes(job)
    proc.send_signal(signal.SIGINT)
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 130, (stdout, stderr)
    assert "interrupted" in stderr
    assert not job_processes(job)
    assert not our_processes()
    # Ctrl-C is StopTrainingJob: the job is described as Stopped (the hosts were running)
    d = json.loads((out / job / "job.json").read_text())
    assert (d["TrainingJobStatus"], d["SecondaryStatus"]) == ("Stopped", "Stopped")
    statuses = [t["Status"] for t in d["SecondaryStatusTransitions"]]
    assert "Stopping" in statuses and statuses[-1] == "Stopped", statuses


# --------------------------------------------------------------------------------------------
# The detectors can fail


def test_detector_sees_a_child_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in our_processes()
    finally:
        child.kill()
        child.wait()
    assert child.pid not in our_processes()


def test_detector_sees_a_process_by_owner_variable_alone() -> None:
    # Re-parented processes (ancestry lost) are found by SMEMU_TEST_OWNER in their environment.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        _wait_for(lambda: child.pid in our_processes(by_ancestry=False), 5, "the child's environ")
    finally:
        child.kill()
        child.wait()


def test_detector_sees_a_new_listening_socket() -> None:
    before = set(listening_sockets())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        new = set(listening_sockets()) - before
        port = f"{s.getsockname()[1]:04X}"
        assert any(addr.endswith(":" + port) for addr, _ in new), new


class _Engine:
    """A docker client stand-in for the leak check: lists what it is given, or fails."""

    def __init__(self, names: list[str] | None) -> None:
        self.names = names
        self.containers = self.networks = self

    def list(self, **_: object) -> list[object]:
        if self.names is None:
            raise ConnectionError("engine went away")
        return [type("Obj", (), {"name": n})() for n in self.names]


def test_detector_sees_docker_leftovers_and_fails_on_a_failed_listing() -> None:
    assert docker_leftovers(_Engine([])) == []
    assert docker_leftovers(_Engine(["sm-x-algo-1"])) == ["container sm-x-algo-1", "network sm-x-algo-1"]
    [problem] = docker_leftovers(_Engine(None))
    assert "could not list" in problem and "engine went away" in problem


def test_reap_keeps_trees_of_live_owners() -> None:
    import tempfile

    from emulator.kept.reap import reap_temp

    tree = Path(tempfile.mkdtemp(prefix="sm-emulator-qa-live-"))
    try:
        (tree / "owner").write_text(f"{os.getpid()}\n")
        assert not any(str(tree) in line for line in reap_temp())
        assert tree.exists()
    finally:
        import shutil

        shutil.rmtree(tree)


def test_shared_script_dirs_import_no_lightning() -> None:
    """The source dirs many jobs share import no Lightning: the preflight refuses a job whose source
    dir imports a package the job's Python lacks, and ``.ci/unprivileged``'s Python has no Lightning
    (its MPI and kept-host jobs run ``tests/scripts``). Lightning's scripts live in
    ``tests/scripts_lightning``."""
    from emulator.preflight import imported_modules

    tests = Path(__file__).parent
    for shared in ("scripts", "scripts_deepspeed"):
        found = imported_modules(tests / shared) & {"lightning", "pytorch_lightning", "lightning_fabric"}
        assert not found, f"tests/{shared} imports {sorted(found)}: move that script to tests/scripts_lightning"
    assert imported_modules(tests / "scripts_lightning") & {"pytorch_lightning"}  # the check can see one
