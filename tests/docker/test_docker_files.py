"""The docker backend without a shared filesystem: files copied through the engine's API.

This machine's engine sees its folders, so copy mode is forced with ``EMULATOR_DOCKER_FILES=copy``
for whole 2-host jobs, and the sentinel check is proven to choose copies by running a job in a
private mount namespace whose output and temp folders the engine cannot see (what
docker-outside-of-docker, ``docker:dind`` and colima look like to the emulator).

Oracles: the files the job scripts write themselves (``tests/scripts``); the failure file is
written by the real sagemaker-training toolkit (``src/sagemaker_training/trainer.py`` of
https://github.com/aws/sagemaker-training-toolkit writes ``/opt/ml/output/failure``); the
engine's own listings for what is left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

import emulator
from emulator.backends.base import HostLaunch, LaunchSpec, Mount, host_addresses, hosts_file
from emulator.backends.docker import files
from emulator.errors import BackendUnavailable

SCRIPTS = Path(__file__).parents[1] / "scripts"
DISTRIBUTIONS = {"torch_distributed": {"torch_distributed": {"enabled": True}},
                 "pytorchddp": {"pytorchddp": {"enabled": True}}}


def _left(job_id: str) -> list[str]:
    """Containers, networks and volumes of the engine labelled with ``job_id``."""
    from emulator.backends.docker import engine
    from emulator.backends.docker.names import LABEL_JOB

    client = engine.client()
    flt = {"label": f"{LABEL_JOB}={job_id}"}
    return ([f"container {c.name}" for c in client.containers.list(all=True, ignore_removed=True, filters=flt)]
            + [f"network {n.name}" for n in client.networks.list(filters=flt)]
            + [f"volume {v.name}" for v in client.volumes.list(filters=flt)])


def _spec(job_dir: Path) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads((job_dir / "launch-spec.json").read_text())
    return spec


def test_files_mode_is_checked() -> None:
    assert files.requested_mode({}) == "auto"
    assert files.requested_mode({files.FILES_ENV: "Copy"}) == "copy"
    with pytest.raises(BackendUnavailable, match="allowed: auto, copy, bind"):
        files.requested_mode({files.FILES_ENV: "nfs"})


def test_inputs_archive_puts_sources_at_their_targets_owned_by_root(tmp_path: Path) -> None:
    import io
    import tarfile

    (tmp_path / "tree" / "code").mkdir(parents=True)
    (tmp_path / "tree" / "code" / "train.py").write_text("print(1)\n")
    (tmp_path / "data.csv").write_text("a,b\n")
    (tmp_path / "chan").mkdir()
    (tmp_path / "chan" / "link.csv").symlink_to(tmp_path / "data.csv")  # a share links its files
    blob = files.inputs_archive([Mount(tmp_path / "tree", "/opt/ml"),
                                 Mount(tmp_path / "chan", "/opt/ml/input/data/train", read_only=True)])
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert {"opt", "opt/ml", "opt/ml/code/train.py", "opt/ml/input/data/train/link.csv"} <= set(members)
        assert all((m.uid, m.gid) == (0, 0) for m in members.values())
        link = members["opt/ml/input/data/train/link.csv"]
        assert link.isfile()
        reader = tar.extractfile(link)
        assert reader is not None and reader.read() == b"a,b\n"
    with pytest.raises(BackendUnavailable, match="does not exist"):
        files.inputs_archive([Mount(tmp_path / "absent", "/data", read_only=True)])


def test_extra_hosts_are_the_spec_hosts_file() -> None:
    addresses = host_addresses("10.0.7.0/24", ["algo-1", "algo-2"])
    launch = HostLaunch(name="algo-1", address=addresses["algo-1"], command=("true",), env={}, workdir="/",
                        mounts=(), hosts_file=hosts_file(addresses), log_path=Path("/dev/null"), argv=())
    assert files.extra_hosts(launch) == {"algo-1": "10.0.7.2", "algo-2": "10.0.7.3"}


@pytest.mark.docker
def test_sentinel_check_sees_this_machines_folders_and_writes_only_the_jobs(tmp_path: Path,
                                                                         docker_ready: None) -> None:
    from emulator.backends.docker import engine
    from emulator.backends.docker.names import DEFAULT_IMAGE, LABEL_JOB, owner_labels

    ro, rw = tmp_path / "channel", tmp_path / "job"
    ro.mkdir()
    rw.mkdir()
    (ro / "part-0.csv").write_text("1\n")
    job_id = f"t{uuid.uuid4().hex[:8]}"
    labels = {LABEL_JOB: job_id, **owner_labels()}
    assert files.probe_bind(engine.client(), DEFAULT_IMAGE, [ro, rw], labels, writable={rw}) == []
    assert [p.name for p in ro.iterdir()] == ["part-0.csv"]  # a user's folder is never written to
    assert list(rw.iterdir()) == []  # the sentinel is gone
    assert _left(job_id) == []


@pytest.mark.docker
@pytest.mark.parametrize("name", list(DISTRIBUTIONS))
def test_copy_mode_two_host_job_brings_the_model_and_logs_back(name: str, tmp_path: Path, docker_ready: None,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(files.FILES_ENV, "copy")
    result = emulator.run(backend="docker", entry_point="env_dump.py", source_dir=SCRIPTS, instance_count=2,
                          instance_type="ml.p4d.24xlarge", gpus_per_host=2, distribution=DISTRIBUTIONS[name],
                          output_path=tmp_path / "out", job_name=f"copy-{name}".replace("_", "-"),
                          echo=False, stop_grace=2, profile="ci")
    spec = _spec(result.job_dir)
    assert (spec["options"]["files"], spec["options"]["files_reason"]) == ("copy", "EMULATOR_DOCKER_FILES=copy")
    assert result.status == "Completed", (result.failure_reason, result.log_tail("algo-1", 30))
    # env_dump.py writes one env-<host>-<rank>.json per rank into /opt/ml/model: 2 hosts x 2 GPUs
    dumps = {n: json.loads(b) for n, b in result.model_files().items() if n.startswith("env-")}
    assert sorted(dumps) == ["env-algo-1-0.json", "env-algo-1-1.json", "env-algo-2-2.json", "env-algo-2-3.json"]
    assert [launch["name"] for launch in spec["hosts"]] == ["algo-1", "algo-2"]
    for launch in spec["hosts"]:
        # each rank ran where the spec says, and resolved every name to the spec's address
        for dump in (d for n, d in dumps.items() if f"-{launch['name']}-" in n):
            assert dump["hostname"] == launch["name"]
            assert dump["resolves"] == {h["name"]: h["address"] for h in spec["hosts"]}
        # the toolkit's own last line, streamed from the container's log
        assert "Reporting training SUCCESS" in Path(launch["log"]).read_text()
    assert _left(spec["job_id"]) == []


@pytest.mark.docker
def test_copy_mode_failing_job_brings_the_failure_file_back(tmp_path: Path, docker_ready: None,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(files.FILES_ENV, "copy")
    result = emulator.run(backend="docker", entry_point="fail_on_algo2.py", source_dir=SCRIPTS, instance_count=2,
                          instance_type="ml.p4d.24xlarge", gpus_per_host=1,
                          distribution={"torch_distributed": {"enabled": True}}, output_path=tmp_path / "out",
                          job_name="copy-fails", echo=False, stop_grace=2, profile="ci")
    assert result.status == "Failed"
    # the toolkit wrote /opt/ml/output/failure inside the container; FailureReason is read from the copy
    assert result.failure_reason is not None and "ZeroDivisionError" in result.failure_reason
    assert "ZeroDivisionError" in result.log_tail("algo-2", 60)
    assert _left(_spec(result.job_dir)["job_id"]) == []


RUNNER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import emulator
    out = Path(sys.argv[1])
    r = emulator.run(backend="docker", entry_point="env_dump.py", source_dir=sys.argv[2], instance_count=2,
                     instance_type="ml.p4d.24xlarge", gpus_per_host=1,
                     distribution={"torch_distributed": {"enabled": True}}, output_path=out,
                     job_name="unseen", echo=False, stop_grace=2, profile="ci")
    spec = json.loads((r.job_dir / "launch-spec.json").read_text())
    print(json.dumps({"status": r.status, "files": spec["options"]["files"], "job_id": spec["job_id"],
                      "reason": spec["options"]["files_reason"], "model": sorted(r.model_files())}))
""")


@pytest.mark.docker
def test_sentinel_check_copies_when_the_engine_cannot_see_the_folders(tmp_path: Path, docker_ready: None) -> None:
    """A private tmpfs (a mount namespace of its own) holds the job's output and temp folders: the
    engine sees an empty folder there, as colima shows an unshared path, so the check must say copy."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to make a folder the engine cannot see")
    private = tmp_path / f"private-{uuid.uuid4().hex[:6]}"
    private.mkdir()
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    env = {k: v for k, v in os.environ.items() if k != files.FILES_ENV}
    env["TMPDIR"] = str(private)
    cmd = (f"mount -t tmpfs tmpfs {private} && exec {sys.executable} {runner} {private / 'out'} {SCRIPTS}")
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", cmd], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert (got["status"], got["files"]) == ("Completed", "copy"), got
    assert "sentinel check" in got["reason"]
    assert got["model"] == ["env-algo-1-0.json", "env-algo-2-1.json"]
    assert not any(private.iterdir())  # nothing reached the folder the engine sees
    assert _left(got["job_id"]) == []


@pytest.mark.docker
def test_engine_error_before_start_is_clear_and_leaves_nothing(tmp_path: Path, docker_ready: None,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from emulator.backends.docker import engine
    from emulator.backends.docker.backend import DockerBackend, _free_subnet
    from emulator.inhost.protocol import JOB_SUBNET

    monkeypatch.setenv(files.FILES_ENV, "copy")
    job_id = f"t{uuid.uuid4().hex[:8]}"
    subnet = _free_subnet(engine.client(), JOB_SUBNET, job_id)
    addresses = host_addresses(subnet, ["algo-1"])
    (tmp_path / "opt_ml").mkdir()
    host = HostLaunch(name="algo-1", address=addresses["algo-1"], command=("true",), env={}, workdir="/",
                      mounts=(Mount(tmp_path / "opt_ml", "/opt/ml"),), hosts_file=hosts_file(addresses),
                      log_path=tmp_path / "algo-1.log", argv=(), image="sagemaker-emulator-test/absent:0")
    spec = LaunchSpec(backend="docker", job_id=job_id, subnet=subnet, hosts=(host,), scratch=tmp_path / "s")
    with pytest.raises(BackendUnavailable, match="could not create the container of algo-1 from "
                                                 "sagemaker-emulator-test/absent:0"):
        DockerBackend().start(spec)
    assert _left(job_id) == []


WRITER = textwrap.dedent("""
    import os, socket, time
    host = socket.gethostname()
    with open(f"/opt/ml/output/data/partial-{host}.txt", "w") as f:
        f.write(host)
    with open(f"/opt/ml/model/weights-{host}.pt", "w") as f:
        f.write(host)
    print("READY", flush=True)
    time.sleep(600)
""")


@pytest.mark.docker
def test_copy_mode_sigterm_still_brings_what_hosts_wrote_back(tmp_path: Path, docker_ready: None) -> None:
    """SIGTERM to the emulator (how CI cancels a job) stops the hosts; what they wrote so far is
    copied out of the stopped containers into model.tar.gz/output.tar.gz, and nothing is left."""
    import signal
    import tarfile

    src = tmp_path / "src"
    src.mkdir()
    (src / "writer.py").write_text(WRITER)
    out = tmp_path / "out"
    env = {**os.environ, files.FILES_ENV: "copy"}
    proc = subprocess.Popen([sys.executable, "-m", "emulator", "run", "--backend", "docker", "--entry-point",
                             "writer.py", "--source-dir", str(src), "--hosts", "2", "--output-dir", str(out),
                             "--job-name", "copy-sigterm", "--profile", "ci"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready: set[str] = set()
        assert proc.stdout is not None
        for line in proc.stdout:  # live per-host output: "[algo-N] READY"
            if line.rstrip().endswith("READY"):
                ready.add(line.split("]")[0].lstrip("["))
            if ready == {"algo-1", "algo-2"}:
                break
        assert ready == {"algo-1", "algo-2"}
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    job_dir = out / "copy-sigterm"
    with tarfile.open(job_dir / "output" / "output.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["partial-algo-1.txt", "partial-algo-2.txt"]
    with tarfile.open(job_dir / "output" / "model.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["weights-algo-1.pt", "weights-algo-2.pt"]
    assert _spec(job_dir)["options"]["files"] == "copy"
    assert _left(_spec(job_dir)["job_id"]) == []


CHANNEL_READER = textwrap.dedent("""
    import json, os, socket
    host = socket.gethostname()
    json.dump(sorted(os.listdir("/opt/ml/input/data/train")), open(f"/opt/ml/model/{host}.json", "w"))
    open(f"/ckpt-outside/{host}.ckpt", "w").write(host)
""")


@pytest.mark.docker
def test_copy_mode_sharded_channel_in_and_outside_checkpoints_out(tmp_path: Path, docker_ready: None,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """ShardedByS3Key gives each instance a disjoint part of the channel's objects (AWS API reference,
    S3DataSource.S3DataDistributionType); files under CheckpointConfig.LocalPath reach S3Uri
    (https://docs.aws.amazon.com/sagemaker/latest/dg/model-checkpoints.html) — here, both through copies."""
    monkeypatch.setenv(files.FILES_ENV, "copy")
    src, data, ckpt = tmp_path / "src", tmp_path / "data", tmp_path / "ckpt"
    src.mkdir()
    data.mkdir()
    (src / "reader.py").write_text(CHANNEL_READER)
    parts = [f"part-{i}.csv" for i in range(4)]
    for p in parts:
        (data / p).write_text(p)
    result = emulator.run(backend="docker", entry_point="reader.py", source_dir=src, instance_count=2,
                          channels={"train": {"path": str(data), "distribution": "ShardedByS3Key"}},
                          checkpoint_dir=ckpt, checkpoint_local_path="/ckpt-outside",
                          output_path=tmp_path / "out", job_name="copy-channels", echo=False, profile="ci")
    assert result.status == "Completed", (result.failure_reason, result.log_tail("algo-1", 30))
    seen = {n: json.loads(b) for n, b in result.model_files().items()}
    assert sorted(seen) == ["algo-1.json", "algo-2.json"]
    assert all(seen.values()) and not set(seen["algo-1.json"]) & set(seen["algo-2.json"])
    assert sorted(seen["algo-1.json"] + seen["algo-2.json"]) == parts
    assert sorted(p.name for p in ckpt.iterdir()) == ["algo-1.ckpt", "algo-2.ckpt"]
    assert sorted(p.name for p in data.iterdir()) == parts  # nothing written into the user's channel
    assert _left(_spec(result.job_dir)["job_id"]) == []


def test_extract_keeps_everything_inside_the_folder(tmp_path: Path) -> None:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add(name: str, data: bytes = b"", **attrs: Any) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            for k, v in attrs.items():
                setattr(info, k, v)
            tar.addfile(info, io.BytesIO(data) if data else None)
        add("ml", type=tarfile.DIRTYPE, mode=0o755)
        add("ml/model", type=tarfile.DIRTYPE, mode=0o755)
        add("ml/model/w.pt", b"weights", mode=0o4755)
        add("ml/model/latest", type=tarfile.SYMTYPE, linkname="w.pt")
        add("ml/model/passwd", type=tarfile.SYMTYPE, linkname="/etc/passwd")
        add("ml/model/up", type=tarfile.SYMTYPE, linkname="../../../outside")
        add("ml/../escape.txt", b"no")
        add("ml/input/data/train/big.csv", b"channel")
    dest = tmp_path / "dest" / "tree"
    files.extract([buf.getvalue()[:1000], buf.getvalue()[1000:]], dest, "ml", skip=["input/data/train"])
    assert (dest / "model" / "w.pt").read_bytes() == b"weights"
    assert (dest / "model" / "w.pt").stat().st_mode & 0o7777 == 0o755  # setuid dropped
    assert os.readlink(dest / "model" / "latest") == "w.pt"
    assert not (dest / "model" / "passwd").is_symlink() and not (dest / "model" / "up").is_symlink()
    assert not (tmp_path / "dest" / "escape.txt").exists() and not (dest / "input").exists()
