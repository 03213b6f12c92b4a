"""The docker backend against a real engine and the emulator image.

Skipped (with the reason) when no engine or no ``sagemaker-emulator:latest`` image is available,
except under ``CI=true``, where that is a failure: CI must build the image (``nox -s image``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from emulator.backends.base import HostLaunch, LaunchSpec, Mount, host_addresses, hosts_file
from emulator.errors import BackendUnavailable
from emulator.inhost.protocol import HostExit

FAKE_OWNER = (4242, 4343)  # not us: proves the chown hand-back
WAIT = 60.0


def test_dlc_image_uris_map_to_the_emulator_image() -> None:
    from emulator.backends.docker.backend import resolve_image
    from emulator.backends.docker.names import DEFAULT_IMAGE

    assert resolve_image(None) == DEFAULT_IMAGE
    dlc = ("763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:"
           "2.2.0-gpu-py310-cu121-ubuntu20.04-sagemaker")
    assert resolve_image(dlc) == DEFAULT_IMAGE
    assert resolve_image("763104351884.dkr.ecr.us-east-1.amazonaws.com/"
                         "huggingface-pytorch-training:2.1.0-transformers4.36.0-gpu-py310"
                         ) == DEFAULT_IMAGE
    assert resolve_image("my-registry/my-trainer:1") == "my-registry/my-trainer:1"
    assert resolve_image("763104351884.dkr.ecr.us-west-2.amazonaws.com/tensorflow-training:2"
                         ) != DEFAULT_IMAGE


def test_import_emulator_does_not_import_docker() -> None:
    code = ("import sys, emulator, emulator.backends, emulator.backends.docker.backend; "
            "sys.exit('docker' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd="/").returncode == 0


@pytest.fixture
def docker_client(docker_ready: None) -> Any:
    from emulator.backends.docker import engine
    from emulator.backends.docker.names import DEFAULT_IMAGE

    client = engine.client()
    assert client.images.get(DEFAULT_IMAGE)
    return client


def _labelled(client: Any, job_id: str) -> list[str]:
    from emulator.backends.docker.names import LABEL_JOB

    flt = {"label": f"{LABEL_JOB}={job_id}"}
    return ([c.name for c in client.containers.list(all=True, ignore_removed=True, filters=flt)]
            + [n.name for n in client.networks.list(filters=flt)])


@pytest.fixture
def make_job(tmp_path: Path, docker_client: Any) -> Iterator[Any]:
    """Factory: a LaunchSpec of hosts running the given commands; checks nothing leaks."""
    from emulator.backends.docker.backend import _free_subnet
    from emulator.backends.docker.names import DEFAULT_IMAGE
    from emulator.inhost.protocol import JOB_SUBNET

    jobs: list[LaunchSpec] = []

    def make(*commands: Sequence[str], mounts: Sequence[Mount] = ()) -> LaunchSpec:
        job_id = f"t{uuid.uuid4().hex[:8]}"
        names = [f"algo-{i}" for i in range(1, len(commands) + 1)]
        subnet = _free_subnet(docker_client, JOB_SUBNET, job_id)
        addresses = host_addresses(subnet, names)
        scratch = tmp_path / job_id / "scratch"
        hosts = []
        for name, cmd in zip(names, commands):
            opt_ml = tmp_path / job_id / name / "opt_ml"
            for sub in ("input/config", "output/data", "model"):
                (opt_ml / sub).mkdir(parents=True)
            hosts.append(HostLaunch(
                name=name, address=addresses[name], command=tuple(cmd), env={"SM_CURRENT_HOST": name},
                workdir="/", mounts=(Mount(opt_ml, "/opt/ml"), *mounts,
                                     Mount(scratch / name / "hosts", "/etc/hosts", read_only=True)),
                hosts_file=hosts_file(addresses), log_path=tmp_path / job_id / f"{name}.log", argv=(),
                image=DEFAULT_IMAGE))
        job = LaunchSpec(backend="docker", job_id=job_id, subnet=subnet, hosts=tuple(hosts), scratch=scratch)
        jobs.append(job)
        return job

    yield make
    from emulator.backends.docker.names import container_name, network_name

    for job in jobs:  # belt and braces: never leave anything behind, even on failure
        leaked = _labelled(docker_client, job.job_id)
        for h in job.hosts:
            try:
                docker_client.containers.get(container_name(job.job_id, h.name)).remove(force=True)
            except Exception:
                pass
        try:
            docker_client.networks.get(network_name(job.job_id)).remove()
        except Exception:
            pass
        assert not leaked, f"left behind: {leaked}"


def _opt_ml(host: HostLaunch) -> Path:
    return next(m.source for m in host.mounts if m.target == "/opt/ml")


def _inhost_mount() -> Mount:
    from emulator.backends.docker.backend import INHOST_ROOT
    from emulator.inhost import ROOT

    return Mount(ROOT, INHOST_ROOT, read_only=True)


def _status(handle: Any) -> dict[str, int | None]:
    return {n: (e.status if e is not None else None) for n, e in ((n, h.poll()) for n, h in handle.hosts.items())}


def _wait_all(handle: Any, timeout: float = WAIT) -> dict[str, int | None]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rcs = _status(handle)
        if all(rc is not None for rc in rcs.values()):
            return rcs
        time.sleep(0.1)
    return _status(handle)


def _wait_log(path: Path, text: str, timeout: float = WAIT) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = path.read_text() if path.exists() else ""
        if text in log:
            return log
        time.sleep(0.1)
    return path.read_text() if path.exists() else ""


SCRIPT = ("hostname; for i in $(seq 200); do getent hosts algo-1 algo-2 | grep -q algo-1 && "
          "getent hosts algo-2 >/dev/null && break; sleep 0.1; done; getent hosts algo-1 algo-2; "
          "echo interfaces=$(ls /sys/class/net | tr '\\n' ,); sleep 2; "
          "ls /opt/sm-emulator/inhost >/dev/null && echo inhost-ok; "
          "echo hi > /opt/ml/output/data/from-$(hostname); mkdir -p /opt/ml/model/sub; "
          "touch /opt/ml/model/sub/m; exit {rc}")


@pytest.mark.docker
def test_two_hosts_names_mounts_logs_exit_codes_teardown(make_job: Any,
                                                         docker_client: Any) -> None:
    from emulator.backends.docker.backend import DockerBackend
    from emulator.backends.docker.names import network_name

    backend = DockerBackend(owner=FAKE_OWNER)
    job = make_job(["sh", "-c", SCRIPT.format(rc=0)], ["sh", "-c", SCRIPT.format(rc=3)],
                   mounts=[_inhost_mount()])
    handle = backend.start(job)
    try:
        assert _wait_all(handle) == {"algo-1": 0, "algo-2": 3}
        net = docker_client.networks.get(network_name(job.job_id))
        assert net.attrs["Internal"] is True
        for h in handle.hosts.values():
            cfg = h.container.attrs["HostConfig"]
            assert not cfg.get("CapAdd") and not cfg.get("Privileged")
            assert h.container.labels["sagemaker-emulator.owner-pid"] == str(os.getpid())
    finally:
        handle.teardown(grace=5)
    handle.teardown(grace=5)  # idempotent
    assert _labelled(docker_client, job.job_id) == []
    for spec in job.hosts:
        log = _wait_log(spec.log_path, "inhost-ok")
        lines = log.splitlines()
        assert lines[0] == spec.name, log
        assert any(ln.endswith(" algo-1") for ln in lines), log
        assert any(ln.endswith(" algo-2") for ln in lines), log
        assert "interfaces=eth0,lo," in lines and "inhost-ok" in lines, log
        out = _opt_ml(spec) / "output" / "data" / f"from-{spec.name}"
        assert out.read_text() == "hi\n"
        for p in (out, _opt_ml(spec) / "model" / "sub", _opt_ml(spec) / "model" / "sub" / "m"):
            assert (p.stat().st_uid, p.stat().st_gid) == FAKE_OWNER, p


@pytest.mark.docker
def test_ssh_as_root_between_hosts_with_the_cluster_key(make_job: Any) -> None:
    from emulator.backends.docker.backend import DockerBackend

    client_cmd = ("for i in $(seq 100); do ssh -o BatchMode=yes -o ConnectTimeout=2 algo-2 "
                  "'echo on-$(hostname) uid=$(id -u)' && exit 0; sleep 0.2; done; exit 1")
    job = make_job(["sh", "-c", client_cmd], ["/usr/sbin/sshd", "-D", "-e"])
    handle = DockerBackend().start(job)
    try:
        deadline = time.monotonic() + WAIT
        while handle.hosts["algo-1"].poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _status(handle)["algo-1"] == 0, job.hosts[0].log_path.read_text()
        assert handle.hosts["algo-2"].poll() is None  # sshd still serving
        assert "on-algo-2 uid=0" in _wait_log(job.hosts[0].log_path, "on-algo-2")
        assert (job.scratch / "ssh" / "id_rsa").exists()
    finally:
        handle.teardown(grace=5)


@pytest.mark.docker
def test_signal_pause_pids_disconnect(make_job: Any, docker_client: Any) -> None:
    from emulator.backends.docker.backend import DockerBackend

    job = make_job(["sh", "-c", "trap 'echo got-term; exit 7' TERM; echo ready; "
                                "while true; do sleep 0.1; done"])
    handle = DockerBackend().start(job)
    host = handle.hosts["algo-1"]
    try:
        _wait_log(job.hosts[0].log_path, "ready")
        pids = host.pids()
        assert pids and all(isinstance(p, int) for p in pids)
        host.signal(signal.SIGSTOP)
        host.container.reload()
        assert host.container.status == "paused"
        host.signal(signal.SIGCONT)
        host.container.reload()
        assert host.container.status == "running"
        argv = handle.exec_argv("algo-1", ["hostname"])
        assert argv[:2] == ["docker", "exec"]
        assert subprocess.run(argv, capture_output=True, text=True).stdout.strip() == "algo-1"
        handle.disconnect("algo-1")
        host.container.reload()
        assert host.container.attrs["NetworkSettings"]["Networks"] == {}
        host.signal(signal.SIGTERM)
        assert _wait_all(handle, timeout=10) == {"algo-1": 7}
        assert host.pids() == []
        host.signal(signal.SIGTERM)  # no raise after exit
    finally:
        handle.teardown(grace=2)


@pytest.mark.docker
def test_teardown_kills_a_host_that_ignores_sigterm(make_job: Any, docker_client: Any) -> None:
    from emulator.backends.docker.backend import DockerBackend

    job = make_job(["sleep", "300"])  # PID 1 without a handler: SIGTERM does nothing
    handle = DockerBackend().start(job)
    handle.teardown(grace=1)  # returns long before the 300-s sleep ends: the host was killed
    assert handle.hosts["algo-1"].poll() == HostExit(137, signal.SIGKILL)
    assert _labelled(docker_client, job.job_id) == []


@pytest.mark.docker
def test_failed_start_removes_what_was_created(make_job: Any, docker_client: Any,
                                               tmp_path: Path) -> None:
    from emulator.backends.docker.backend import DockerBackend

    missing = Mount(tmp_path / "does-not-exist", "/data", read_only=True)
    job = make_job(["true"], ["true"], mounts=[missing])
    with pytest.raises(Exception, match="does-not-exist"):
        DockerBackend().start(job)
    assert _labelled(docker_client, job.job_id) == []


@pytest.mark.docker
def test_missing_image_names_the_session(docker_client: Any) -> None:
    from emulator.backends.docker.backend import DockerBackend

    with pytest.raises(BackendUnavailable, match="docker pull"):
        DockerBackend().check(image="sagemaker-emulator-test/absent:0")


@pytest.mark.docker
def test_a_framework_job_needs_no_default_image_before_it_is_prepared(docker_client: Any, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``nox -s emulate`` builds only the image its docker scenario runs (a framework family's, in
    ``prepare``): checking such a job asks the engine, not for the default image; a job of the
    default image still needs it first (here: a default image missing from the engine)."""
    from emulator.backends.docker import backend
    from emulator.job import request as rq

    monkeypatch.setattr(backend, "DEFAULT_IMAGE", "sagemaker-emulator-test/absent:0")
    (tmp_path / "train.py").write_text("print('hi')\n")
    framework = rq.create(entry_point="train.py", source_dir=tmp_path, framework_version="1.12",
                          output_path=tmp_path / "out", job_name="fw")
    plain = rq.create(entry_point="train.py", source_dir=tmp_path, output_path=tmp_path / "out", job_name="plain")
    backend.DockerBackend().check(request=framework)
    with pytest.raises(BackendUnavailable, match="sagemaker-emulator-test/absent:0"):
        backend.DockerBackend().check(request=plain)


#: The reaper tests fabricate a dead owner's containers and networks, which any machine-wide reap
#: removes at once (the other one here, test_kept's `python -m emulator reap`): CI failed once when
#: the other test's reap_jobs() removed this one's new network between docker-py's create and its
#: inspection. One xdist worker runs every test of the group, one after another.
MACHINE_WIDE_REAP = pytest.mark.xdist_group("machine-wide-reap")


@pytest.mark.docker
@MACHINE_WIDE_REAP
def test_reap_removes_leftovers_of_a_dead_owner(docker_client: Any, tmp_path: Path) -> None:
    from emulator.backends.docker.names import (
        DEFAULT_IMAGE,
        LABEL_HOST,
        LABEL_JOB,
        LABEL_OWNER_HOST,
        LABEL_OWNER_PID,
        owner_labels,
    )
    from emulator.backends.docker.reaper import reap_jobs

    dead = subprocess.Popen(["true"])
    dead.wait()
    job_id = f"t{uuid.uuid4().hex[:8]}"
    dead_labels = {LABEL_JOB: job_id, LABEL_OWNER_PID: str(dead.pid),
                   LABEL_OWNER_HOST: socket.gethostname()}
    live_labels = {**owner_labels(), LABEL_JOB: f"{job_id}-live"}
    opt_ml = tmp_path / "opt_ml"
    opt_ml.mkdir()
    net = docker_client.networks.create(f"sm-emulator-{job_id}", internal=True,
                                        labels=dead_labels)
    live_net = docker_client.networks.create(f"sm-emulator-{job_id}-live", internal=True,
                                             labels=live_labels)
    try:
        c = docker_client.containers.run(
            DEFAULT_IMAGE, ["sh", "-c", "touch /opt/ml/leftover; sleep 300"], detach=True,
            name=f"sm-emulator-{job_id}-algo-1", network=net.name,
            labels={**dead_labels, LABEL_HOST: "algo-1"},
            volumes={str(opt_ml): {"bind": "/opt/ml", "mode": "rw"}})
        deadline = time.monotonic() + WAIT
        while not (opt_ml / "leftover").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        removed = reap_jobs(owner=FAKE_OWNER)
        assert c.name in removed and net.name in removed
        assert live_net.name not in removed
        assert _labelled(docker_client, job_id) == []
        st = (opt_ml / "leftover").stat()
        assert (st.st_uid, st.st_gid) == FAKE_OWNER
        docker_client.networks.get(live_net.id)  # still there: its owner (us) is alive
    finally:
        for obj in (f"sm-emulator-{job_id}-algo-1",):
            try:
                docker_client.containers.get(obj).remove(force=True)
            except Exception:
                pass
        for n in (net, live_net):
            try:
                n.remove()
            except Exception:
                pass


@pytest.mark.docker
@MACHINE_WIDE_REAP
def test_reap_ignores_containers_removed_while_it_lists(docker_client: Any) -> None:
    """Another job's teardown may remove a container between the engine's listing and its
    inspection; ``python -m emulator reap`` must not fail on that while other jobs end. A
    regression test: CI failed once with ``NotFound`` from ``containers.list`` (docker-py inspects
    each listed container unless told ``ignore_removed``) while other workers' jobs ended."""
    import threading

    from emulator.backends.docker.names import DEFAULT_IMAGE, LABEL_JOB, owner_labels
    from emulator.backends.docker.reaper import reap, reap_jobs

    labels = {**owner_labels(), LABEL_JOB: f"t{uuid.uuid4().hex[:8]}-churn"}
    stop = threading.Event()
    churned: list[int] = []

    def churn() -> None:
        while not stop.is_set():
            made = [docker_client.containers.create(DEFAULT_IMAGE, ["true"], labels=labels)
                    for _ in range(4)]
            for c in made:
                c.remove(force=True)
            churned.append(len(made))

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        while not churned:  # at least one round of containers came and went
            time.sleep(0.01)
        for _ in range(30):
            assert not any(labels[LABEL_JOB] in line for line in reap_jobs())
            reap(docker_client)
    finally:
        stop.set()
        thread.join()
    assert _labelled(docker_client, labels[LABEL_JOB]) == []
