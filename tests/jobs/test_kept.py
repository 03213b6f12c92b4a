"""``--keep-hosts``: hosts still running at the end of a job are kept (frozen) for ``shell``/``ps``
until ``reap`` (emulator/kept/records.py, emulator/kept/shell.py).

Run as root and, by ``.ci/unprivileged``, as an ordinary user (the job's user namespace). Oracles
independent of the code under test: the job's own output (``WARM rank R of W on HOST``, printed by
each rank from ``torch.distributed``), the launch spec the emulator wrote before the hosts started
(what each host must have: hostname, ``/etc/hosts``), SageMaker's ``resourceconfig.json``
(``current_host``), DescribeTrainingJob's statuses (``Stopped``/``MaxRuntimeExceeded``, ``Failed``)
and ``/proc`` of this machine (state ``T``: stopped).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from emulator import supervisor
from emulator.console import RAW_SUFFIX
from emulator.errors import RequestError
from emulator.inhost import protocol as P
from emulator.job.request import create
from emulator.job.result import JobResult
from emulator.kept import records as kept
from emulator.kept import shell as postmortem

from ..fakes import FakeBackend, FakeClock, HostScript

SCRIPTS = Path(__file__).parents[1] / "scripts"
#: Generous: four torch ranks start on a loaded 2-core machine (a wait, not a timed assertion).
WARM_TIMEOUT = 300.0
TORCH_DIST = '{"torch_distributed": {"enabled": true}}'

#: One xdist worker for this module and the other test of a machine-wide reap
#: (tests/jobs/test_framework_jobs.py): ``python -m emulator reap`` without a job removes every kept job
#: and ownerless helper container, including what a test running beside it expects to find.
pytestmark = pytest.mark.xdist_group("machine-wide-reap")


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m emulator ARGS`` as a user types it (``shell`` replaces the process: never in-process)."""
    return subprocess.run([sys.executable, "-m", "emulator", *args], input=stdin, capture_output=True, text=True,
                          timeout=120, check=False)


def job_processes(job_name: str) -> list[int]:
    """Live processes of this machine whose environment names the job (any namespace)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and P.proc_environ(int(entry)).get("TRAINING_JOB_NAME") == job_name:
            stat = P.proc_stat(int(entry))
            if stat is not None and stat.state not in ("Z", "X"):
                out.append(int(entry))
    return out


def left_after_reap(job_name: str, wait: float = 30.0) -> dict[int, list[str]]:
    """The job's processes still alive ``wait`` seconds after a reap (pid → argv; empty when all went).
    SIGKILL of the namespace agent ends every host process, but the kernel ends them one by one:
    wait for that rather than look once."""
    deadline = time.monotonic() + wait
    while (left := job_processes(job_name)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return {pid: P.proc_cmdline(pid) for pid in left}


@pytest.fixture
def reaped() -> Iterator[list[Path]]:
    """Job folders to reap at the end whatever happens (the autouse fixture checks nothing is left):
    by job, so a run killed before it wrote its kept record is reaped too (its scratch tree, a kept
    agent or containers that name it)."""
    jobs: list[Path] = []
    yield jobs
    for job_dir in jobs:
        try:
            kept.reap(job_dir)
        except RequestError:  # neither kept nor left anything: nothing to reap
            pass


#: ``WARM rank R of W on HOST``, wherever it is in a host's log: two ranks of a host share its
#: stdout, so one rank's text may follow another's before either newline (no line anchors).
WARM = re.compile(r"WARM rank (\d+) of (\d+) on (algo-\d+)")


def warm_ranks(logs: Path) -> dict[int, str]:
    """Rank → host, from every ``WARM`` marker in the host logs under ``logs``; a rank's marker must
    name the host whose log holds it, and no rank may be claimed twice."""
    warm: dict[int, str] = {}
    for log in sorted(p for p in logs.glob("algo-*.log") if not p.name.endswith(RAW_SUFFIX)):
        for rank, _world, host in WARM.findall(log.read_text(errors="replace")):
            assert host == log.stem, f"rank {rank} says it runs on {host} but printed into {log.name}"
            assert warm.setdefault(int(rank), host) == host, f"rank {rank} printed WARM on two hosts"
    return warm


def wait_for_warm(logs: Path, ranks: int, proc: subprocess.Popen[str]) -> dict[int, str]:
    """Rank → host, from each rank's own ``WARM rank R of W on HOST`` marker."""
    deadline = time.monotonic() + WARM_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the emulator exited early ({proc.returncode})")
        warm = warm_ranks(logs)
        if len(warm) == ranks:
            return warm
        time.sleep(0.2)
    raise AssertionError(f"timed out after {WARM_TIMEOUT:g} s waiting for {ranks} ranks to print WARM "
                         f"(seen: {warm_ranks(logs)})")


def test_warm_markers_are_found_when_two_ranks_lines_interleave(tmp_path: Path) -> None:
    """algo-2's log held ``WARM rank 2 of 4 on algo-2WARM rank 3 of 4 on algo-2`` (the
    text and the newline of a ``print`` are two writes); a per-line ``startswith`` lost rank 3."""
    (tmp_path / "algo-1.log").write_text("[toolkit] Invoking script\nWARM rank 0 of 4 on algo-1\n"
                                         "WARM rank 1 of 4 on algo-1\n")
    (tmp_path / "algo-2.log").write_text("noise WARM rank 2 of 4 on algo-2WARM rank 3 of 4 on algo-2\n\n")
    assert warm_ranks(tmp_path) == {0: "algo-1", 1: "algo-1", 2: "algo-2", 3: "algo-2"}
    (tmp_path / "algo-1.log").write_text("WARM rank 0 of 4 on algo-2\n")  # in algo-1's log: refused
    with pytest.raises(AssertionError, match="rank 0 says it runs on algo-2"):
        warm_ranks(tmp_path)


# -- end to end, process backend (root, and an ordinary user in CI) --------------------------------
def test_cli_keeps_the_hosts_of_a_stopped_job_for_shell_ps_and_reap(tmp_path: Path, reaped: list[Path]) -> None:
    """The emulator exits; its hung hosts stay, frozen; shell/ps work from another process; reap ends them."""
    name = f"kept-{uuid.uuid4().hex[:6]}"
    job_dir = tmp_path / "out" / name
    reaped.append(job_dir)
    with open(tmp_path / "console.txt", "w+") as console:
        proc = subprocess.Popen(
            [sys.executable, "-m", "emulator", "run", "--entry-point", "hang_reader.py", "--source-dir", str(SCRIPTS),
             "--hosts", "2", "--instance-type", "ml.p4d.24xlarge", "--gpus-per-host", "2", "--distribution",
             TORCH_DIST, "--max-run", "900", "--stop-grace", "2", "--keep-hosts", "--output-dir", str(tmp_path / "out"),
             "--job-name", name], stdout=console, stderr=subprocess.STDOUT, text=True)
        try:
            warm = wait_for_warm(job_dir / "logs", 4, proc)
            proc.send_signal(signal.SIGTERM)  # how CI and `timeout` stop a run: the Ctrl-C path
            assert proc.wait(timeout=120) == 128 + signal.SIGTERM
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        console.seek(0)
        output = console.read()
    # SageMaker's view is unchanged: the job was stopped
    described = json.loads((job_dir / "job.json").read_text())
    assert (described["TrainingJobStatus"], described["SecondaryStatus"]) == ("Stopped", "Stopped")
    assert described["Emulator"]["KeptHosts"]["Hosts"] == ["algo-1", "algo-2"]
    assert [h["How"] for h in described["Emulator"]["Hosts"]] == ["kept (frozen)", "kept (frozen)"]
    assert "kept for post-mortem (frozen; SageMaker would have stopped them): algo-1, algo-2" in output
    assert f"python -m emulator shell {job_dir.resolve()} algo-1 [-- CMD]" in output
    assert f"python -m emulator reap {job_dir.resolve()}" in output

    # Done when: `shell` runs `hostname` in a kept algo-2 and prints `algo-2`
    done = cli("shell", str(job_dir), "algo-2", "--", "hostname")
    assert (done.returncode, done.stdout, done.stderr) == (0, "algo-2\n", "")
    # the host's /etc/hosts, /opt/ml and working folder, as the launch spec says and SageMaker writes them
    spec = {h["name"]: h for h in json.loads((job_dir / "launch-spec.json").read_text())["hosts"]}
    assert cli("shell", str(job_dir), "algo-2", "--", "cat", "/etc/hosts").stdout == spec["algo-2"]["hosts_file"]
    config = cli("shell", str(job_dir), "algo-2", "--", "cat", "/opt/ml/input/config/resourceconfig.json")
    assert json.loads(config.stdout)["current_host"] == "algo-2"
    assert cli("shell", str(job_dir), "algo-1", "--", "pwd").stdout == spec["algo-1"]["workdir"] + "\n"
    # an interactive session's commands from stdin; CMD's exit status is the shell's
    assert cli("shell", str(job_dir), "algo-1", stdin="hostname\n").stdout == "algo-1\n"
    assert cli("shell", str(job_dir), "algo-1", "--", "sh", "-c", "exit 7").returncode == 7

    # ps: every rank where its own output says it runs, with its local rank, frozen
    listing = postmortem.processes(job_dir)
    ranks = {int(r.rank): (host, r) for host, rows in listing.items() if not isinstance(rows, str)
             for r in rows if r.rank is not None and "hang_reader.py" in r.command}
    assert {rank: host for rank, (host, _) in ranks.items()} == warm
    assert {rank: row.local_rank for rank, (_, row) in ranks.items()} == {0: "0", 1: "1", 2: "0", 3: "1"}
    for _, row in ranks.values():
        assert P.proc_stat(row.machine_pid).state == "T"  # type: ignore[union-attr]
    # the pid shown is the host's own: the host's /proc has that process, with that command line
    host, row = ranks[3]
    inside = cli("shell", str(job_dir), host, "--", "cat", f"/proc/{row.pid}/cmdline")
    assert inside.stdout.replace("\0", " ").strip() == row.command
    printed = cli("ps", str(job_dir))
    assert printed.returncode == 0 and "hang_reader.py" in printed.stdout and "algo-2:" in printed.stdout
    assert str(job_dir.resolve()) in cli("ps").stdout  # the kept jobs of this machine's temp folder

    # bad input: nothing is entered, exit status 2, the message names what is missing
    unknown = cli("shell", str(job_dir), "algo-9", "--", "hostname")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert "HOST: algo-9 is not a host of job" in unknown.stderr and "algo-1, algo-2" in unknown.stderr

    # reap without arguments finds the job by its record in the temp folder and ends every process
    before = job_processes(name)
    assert before
    reap = cli("reap")
    assert reap.returncode == 0 and f"reaped kept job {name}" in reap.stdout
    assert left_after_reap(name) == {}
    assert not (job_dir / kept.RECORD).exists()
    gone = cli("shell", str(job_dir), "algo-2", "--", "hostname")
    assert gone.returncode == 2 and "is not a kept job" in gone.stderr and "have been reaped" in gone.stderr


#: ``python -m emulator run`` whose ``kept.keep`` freezes the hosts and hands them off, then SIGKILLs
#: its own emulator before the record is written: the worst moment of a kill.
KILLED_IN_KEEP = """\
import os, signal, sys
from emulator import cli
from emulator.kept import records as kept

def keep(handle, **kwargs):
    handle.keep()
    os.kill(os.getpid(), signal.SIGKILL)

kept.keep = keep
sys.exit(cli.main(sys.argv[1:]))
"""


def _wait_for_ready(logs: Path, hosts: int, proc: subprocess.Popen[str]) -> None:
    """Until every host's log holds ``READY`` anywhere in it (sleeper.py: one process per host)."""
    files = [logs / f"algo-{i}.log" for i in range(1, hosts + 1)]
    deadline = time.monotonic() + WARM_TIMEOUT
    while not all(f.exists() and "READY" in f.read_text(errors="replace") for f in files):
        assert proc.poll() is None, f"the emulator exited early ({proc.returncode})"
        assert time.monotonic() < deadline, f"no READY from {hosts} hosts in {WARM_TIMEOUT:g} s"
        time.sleep(0.1)


def _scratch_trees(name: str) -> list[Path]:
    """This job's scratch trees in this test process's temp folder (tests/conftest.py: private)."""
    return sorted(Path(tempfile.gettempdir()).glob(f"{kept.SCRATCH_PREFIX}{name[:20]}-*"))


@pytest.mark.parametrize("moment", ["while-running", "after-freeze-before-record"])
def test_a_job_killed_before_its_kept_record_is_still_reaped_by_job(tmp_path: Path, reaped: list[Path],
                                                                     moment: str) -> None:
    """A ``--keep-hosts`` run SIGKILLed before it wrote ``kept.json``: ``reap JOB_DIR`` finds what it
    left by the job (the scratch tree names the job; the kept agent names the scratch tree) and
    removes it all: the frozen hosts (after the freeze) and the scratch tree."""
    name = f"kept-kill-{uuid.uuid4().hex[:6]}"
    job_dir = tmp_path / "out" / name
    reaped.append(job_dir)
    prefix = ["-c", KILLED_IN_KEEP] if moment == "after-freeze-before-record" else ["-m", "emulator"]
    # after-freeze: the keep comes from MaxRuntimeInSeconds, at a point of the supervisor's loop, not
    # from a signal that lands anywhere in it (the SIGTERM keep: test_cli_keeps_the_hosts_of_a_stopped_job…);
    # the hosts need not be READY by then: whatever they run is frozen and handed off (job_processes below)
    max_run = "3" if moment == "after-freeze-before-record" else "900"
    proc = subprocess.Popen(
        [sys.executable, *prefix, "run", "--entry-point", "sleeper.py", "--source-dir", str(SCRIPTS),
         "--hosts", "2", "--max-run", max_run, "--stop-grace", "2", "--keep-hosts", "--quiet",
         "--output-dir", str(tmp_path / "out"), "--job-name", name],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    try:
        if moment == "while-running":
            _wait_for_ready(job_dir / "logs", 2, proc)
            proc.kill()
        # else MaxRuntime keeps the hosts; the patched keep kills the emulator
        assert proc.wait(timeout=180) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not (job_dir / kept.RECORD).exists() and not (job_dir / "job.json").exists()
    [scratch] = _scratch_trees(name)
    assert not (scratch / kept.RECORD).exists()
    if moment == "after-freeze-before-record":  # handed off: the hosts outlive their emulator
        assert job_processes(name)
    done = cli("reap", str(job_dir))
    assert done.returncode == 0, done.stderr
    assert f"removed {scratch}, left by a run of {name}" in done.stdout
    if moment == "after-freeze-before-record":
        assert "killed the namespace agent" in done.stdout and f"of {name} (its emulator" in done.stdout
    assert left_after_reap(name) == {}
    assert _scratch_trees(name) == []
    again = cli("reap", str(job_dir))  # nothing is left: refused as any job that kept nothing
    assert again.returncode == 2 and "is not a kept job" in again.stderr


class _FakeDockerObject:
    """A container or network as the docker SDK lists it: name, labels, status; records removal."""

    def __init__(self, name: str, labels: dict[str, str], removed: list[str], *, network: bool = False) -> None:
        self.name, self.labels, self.status, self._removed = name, labels, "running", removed
        self.attrs: dict[str, Any] = {"Labels": labels, "Mounts": [], "Config": {}}
        if network:
            self.disconnect = lambda *a, **k: None

    def kill(self) -> None:
        self.status = "exited"

    def remove(self, **_: Any) -> None:
        self._removed.append(self.name)


def test_docker_leftovers_of_a_killed_run_are_found_by_their_scratch_label(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Docker hosts outlive a SIGKILLed emulator (no agent ends them): ``reap JOB_DIR`` removes
    the containers and network labelled with that job's scratch folder whose owner is gone, and
    nothing of a live owner or of another scratch folder."""
    from emulator.backends.docker import engine, names, reaper

    gone = subprocess.Popen(["true"])
    gone.wait()
    scratch = tmp_path / f"{kept.SCRATCH_PREFIX}job-abc"
    dead = {names.LABEL_OWNER_PID: str(gone.pid), names.LABEL_OWNER_START: ""}
    alive = dict(names.owner_labels())
    removed: list[str] = []

    def obj(name: str, folder: Path, owner: dict[str, str], network: bool = False) -> _FakeDockerObject:
        return _FakeDockerObject(name, {names.LABEL_SCRATCH: str(folder), **owner}, removed, network=network)

    containers = [obj("ours-algo-1", scratch / "backend-0", dead), obj("ours-algo-2", scratch / "backend-1", dead),
                  obj("live-algo-1", scratch / "backend-0", alive),
                  obj("other-algo-1", tmp_path / f"{kept.SCRATCH_PREFIX}job-abcd" / "backend-0", dead)]
    networks = [obj("ours-net", scratch / "backend-0", dead, True),
                obj("other-net", tmp_path / "elsewhere" / "backend-0", dead, True)]

    client = SimpleNamespace(containers=SimpleNamespace(list=lambda **_: containers),
                             networks=SimpleNamespace(list=lambda **_: networks))
    monkeypatch.setattr(engine, "client", lambda *a, **k: client)
    assert sorted(reaper.reap_scratch(scratch, owner=(0, 0))) == ["ours-algo-1", "ours-algo-2", "ours-net"]
    assert sorted(removed) == ["ours-algo-1", "ours-algo-2", "ours-net"]


def test_max_runtime_keeps_every_host_and_shell_enters_algo_2(tmp_path: Path, reaped: list[Path]) -> None:
    """Also: a freeze fault's end (which thaws its host) does not thaw a kept host."""
    request = create(entry_point="sleeper.py", source_dir=SCRIPTS, instance_count=2, output_path=tmp_path,
                     job_name=f"kept-max-{uuid.uuid4().hex[:6]}", max_run=3)
    reaped.append(request.job_dir)
    result = supervisor.run(request, echo=False, stop_grace=2, keep_hosts=True, faults=["freeze:algo-2"])
    assert (result.status, result.secondary_status) == ("Stopped", "MaxRuntimeExceeded")
    for host, rows in postmortem.processes(result.job_dir).items():
        assert not isinstance(rows, str) and rows, host
        assert {r.state for r in rows} == {"T"}, (host, rows)
    assert [h.how for h in result.hosts] == ["kept (frozen)", "kept (frozen)"]
    record = kept.load(result.job_dir)
    assert sorted(record.hosts) == ["algo-1", "algo-2"] and record.data["reason"] == "max-runtime"
    assert record.job_dir in [j.job_dir for j in kept.find_all()]
    done = cli("shell", str(result.job_dir), "algo-2", "--", "hostname")
    assert (done.returncode, done.stdout) == (0, "algo-2\n"), (done.stderr, postmortem.processes(result.job_dir))
    kept.reap(result.job_dir)
    assert left_after_reap(request.job_name) == {}
    assert not record.scratch.exists()


def test_failed_job_keeps_the_peers_still_running_not_the_failed_host(tmp_path: Path, reaped: list[Path]) -> None:
    request = create(entry_point="fail_on_algo2.py", source_dir=SCRIPTS, instance_count=2, output_path=tmp_path,
                     job_name=f"kept-fail-{uuid.uuid4().hex[:6]}")
    reaped.append(request.job_dir)
    result = supervisor.run(request, echo=False, stop_grace=2, keep_hosts=True)
    assert result.status == "Failed" and "ZeroDivisionError" in (result.failure_reason or "")
    assert result.description["Emulator"]["KeptHosts"]["Hosts"] == ["algo-1"]
    how = {h["Host"]: h["How"] for h in result.description["Emulator"]["Hosts"]}
    assert how["algo-1"] == "kept (frozen)"

    failed = cli("shell", str(result.job_dir), "algo-2", "--", "hostname")
    assert failed.returncode == 2 and failed.stdout == ""
    assert f"HOST: algo-2 was not kept: it had ended before the job did ({how['algo-2']}); kept: algo-1" \
        in failed.stderr
    assert cli("shell", str(result.job_dir), "algo-1", "--", "hostname").stdout == "algo-1\n"

    # a kept host that exits later: shell and ps say so, before entering anything
    root = kept.load(result.job_dir).hosts["algo-1"]["pid"]
    os.kill(root, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while (stat := P.proc_stat(root)) is not None and stat.state not in ("Z", "X"):
        assert time.monotonic() < deadline, "the host's PID 1 did not go"
        time.sleep(0.05)
    exited = cli("shell", str(result.job_dir), "algo-1", "--", "hostname")
    assert exited.returncode == 2 and "algo-1 has exited since it was kept" in exited.stderr
    listing = cli("ps", str(result.job_dir))
    assert listing.returncode == 2 and "no kept host of" in listing.stderr
    kept.reap(result.job_dir)
    assert left_after_reap(request.job_name) == {}


def test_not_a_kept_job_is_refused_before_anything_is_entered(tmp_path: Path) -> None:
    missing = cli("shell", str(tmp_path / "nope"), "algo-1", "--", "hostname")
    assert missing.returncode == 2 and f"JOB_DIR: {tmp_path / 'nope'} is not a folder" in missing.stderr
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "job.json").write_text(json.dumps({"TrainingJobStatus": "Completed", "Emulator": {}}))
    for command in (["shell", str(tmp_path / "job"), "algo-1"], ["ps", str(tmp_path / "job")],
                    ["reap", str(tmp_path / "job")]):
        refused = cli(*command)
        assert refused.returncode == 2, command
        assert f"JOB_DIR: {tmp_path / 'job'} is not a kept job: no kept.json (the job ran without --keep-hosts" \
            in refused.stderr


# -- docker backend --------------------------------------------------------------------------------
@pytest.mark.docker
def test_docker_keeps_containers_for_shell_ps_and_reap(tmp_path: Path, docker_ready: None,
                                                        reaped: list[Path]) -> None:
    import docker  # type: ignore[import-not-found]

    request = create(entry_point="sleeper.py", source_dir=SCRIPTS, instance_count=2, output_path=tmp_path,
                     job_name=f"kept-docker-{uuid.uuid4().hex[:6]}", max_run=3)
    reaped.append(request.job_dir)
    # a freeze fault pauses algo-2's container; a paused container refuses `docker exec`: kept, it is not paused
    result = supervisor.run(request, backend="docker", echo=False, stop_grace=2, keep_hosts=True,
                            faults=["freeze:algo-2"])
    assert (result.status, result.secondary_status) == ("Stopped", "MaxRuntimeExceeded")
    assert result.description["Emulator"]["KeptHosts"]["Hosts"] == ["algo-1", "algo-2"]
    done = cli("shell", str(result.job_dir), "algo-2", "--", "hostname")
    assert (done.returncode, done.stdout) == (0, "algo-2\n")
    spec = {h["name"]: h for h in json.loads((result.job_dir / "launch-spec.json").read_text())["hosts"]}
    hosts_file = cli("shell", str(result.job_dir), "algo-1", "--", "cat", "/etc/hosts").stdout
    assert hosts_file == spec["algo-1"]["hosts_file"]
    assert cli("shell", str(result.job_dir), "algo-1", "--", "sh", "-c", "exit 5").returncode == 5
    listing = postmortem.processes(result.job_dir)
    for host in ("algo-1", "algo-2"):
        rows = listing[host]
        assert not isinstance(rows, str)
        pid1 = next(r for r in rows if r.pid == 1)  # the container command, frozen
        assert pid1.state == "T" and pid1.command.endswith("train")
    client = docker.from_env()
    label = {"label": f"sagemaker-emulator.job-name={request.job_name}"}
    assert len(client.containers.list(filters=label)) == 2
    kept.reap(result.job_dir)
    assert client.containers.list(all=True, filters=label) == []
    uid = os.getuid()
    assert [p for p in result.job_dir.rglob("*") if p.lstat().st_uid != uid] == []  # handed back, as teardown does


# -- the supervisor's policy (fake backend, fake clock) -------------------------------------------
@pytest.fixture
def fake_job(tmp_path: Path) -> Any:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('hi')\n")
    return create(entry_point="train.py", source_dir=src, instance_count=2, output_path=tmp_path / "out",
                  job_name="fake-kept", max_run=60)


def _fake_run(request: Any, scripts: Sequence[dict[str, HostScript]], **kwargs: Any) -> tuple[JobResult, FakeBackend]:
    backend = FakeBackend(FakeClock(), list(scripts))
    result = supervisor.run(request, backend=backend, echo=False, stop_grace=120, clock=backend.clock,
                            observers=[], keep_hosts=True, **kwargs)
    return result, backend


def test_kept_hosts_get_no_sigterm_and_the_status_stays_sagemakers(fake_job: Any, reaped: list[Path]) -> None:
    reaped.append(fake_job.job_dir)
    result, backend = _fake_run(fake_job, [{}])
    assert (result.status, result.secondary_status) == ("Stopped", "MaxRuntimeExceeded")
    hosts = backend.jobs[0].hosts
    assert hosts["algo-1"].signals == hosts["algo-2"].signals == [signal.SIGSTOP]  # frozen, never stopped
    assert backend.clock.now < fake_job.max_runtime_seconds + 1  # no SIGTERM grace was waited for
    assert result.description["Emulator"]["KeptHosts"]["Hosts"] == ["algo-1", "algo-2"]
    assert kept.load(fake_job.job_dir).scratch.exists()  # the hosts' scratch tree stays until reap


def test_fail_fast_keeps_only_hosts_that_still_run(fake_job: Any, reaped: list[Path]) -> None:
    reaped.append(fake_job.job_dir)
    result, backend = _fake_run(fake_job, [{"algo-2": HostScript(0.2, status=3)}])
    assert result.status == "Failed" and result.failure_reason == "AlgorithmError: Exit Code: 3"
    assert backend.jobs[0].kept == ["algo-1"]
    assert {h.name: h.how for h in result.hosts} == {"algo-1": "kept (frozen)", "algo-2": "exit 3"}
    assert kept.load(fake_job.job_dir).exited == {"algo-2": "exit 3"}


def test_nothing_is_kept_when_every_host_ended(fake_job: Any) -> None:
    result, _ = _fake_run(fake_job, [{"algo-1": HostScript(0.3), "algo-2": HostScript(0.2)}])
    assert result.status == "Completed"
    assert "KeptHosts" not in result.description["Emulator"] and not (fake_job.job_dir / kept.RECORD).exists()
    assert (fake_job.job_dir / "hosts" / "algo-1").is_dir()  # --keep-hosts still keeps the /opt/ml trees


def test_a_spot_interruption_keeps_nothing_of_the_replaced_attempt(fake_job: Any) -> None:
    from emulator.diagnostics.faults import Spot, Trigger

    done = {"algo-1": HostScript(0.3), "algo-2": HostScript(0.3)}
    result, backend = _fake_run(fake_job, [{}, done], faults=[Spot(Trigger(1.0))])
    assert result.status == "Completed" and len(backend.jobs) == 2
    assert backend.jobs[0].kept == [] and "KeptHosts" not in result.description["Emulator"]
