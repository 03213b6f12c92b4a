"""The MPI family (``mpi``, ``smdistributed.dataparallel``, ``pytorchddp``) launched by the REAL
toolkit on the process backend: sshd in every host, ``mpirun`` over ssh from algo-1, ``orted`` on
the workers, the toolkit's status files and sleeps. Root only (sshd cannot run in an unprivileged
user namespace; the non-root path is tests/jobs/test_mpi_nonroot.py); the prediction and ssh-material
tests run everywhere. A missing sshd, mpirun or mpi4py skips these tests, and fails them under
``CI=true`` (see ``require`` in conftest.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

import emulator
from emulator.backends import get_backend
from emulator.backends.process import sshd
from emulator.job import request as rq
from emulator.job import toolkit_model as tk
from emulator.job.result import JobResult
from emulator.supervisor import launch_plan

from ..conftest import require, require_mpi

#: One worker runs this module's tests: its fixture's three MPI jobs then run once (``--dist
#: loadgroup``, the nox default).
pytestmark = pytest.mark.xdist_group("mpi_launch")
SCRIPTS = Path(__file__).parents[1] / "scripts"
MSG = "hello world; a=b \"q\""
BASE = dict(entry_point="mpi_env_report.py", source_dir=SCRIPTS, instance_count=2,
            instance_type="ml.p4d.24xlarge", gpus_per_host=2)
JOBS: dict[str, dict[str, Any]] = {
    "mpi": dict(distribution={"mpi": {"enabled": True, "processes_per_host": 2}},
                hyperparameters={"mode": "mpi", "msg": MSG}),
    "smddp": dict(distribution={"smdistributed": {"dataparallel": {"enabled": True}}},
                  hyperparameters={"mode": "smddp", "msg": MSG}),
    "pytorchddp": dict(distribution={"pytorchddp": {"enabled": True}},
                       hyperparameters={"mode": "ddp", "msg": MSG}),
}


needs_root_sshd = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="real sshd in every host needs root (an unprivileged user namespace cannot setgroups, so sshd "
           "cannot log anyone in); the non-root MPI path is tested in test_mpi_nonroot.py")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[JobResult, float]]:
    require_mpi()
    out: dict[str, tuple[JobResult, float]] = {}
    for name, extra in JOBS.items():
        t0 = time.monotonic()
        result = emulator.run(output_path=tmp_path_factory.mktemp(name), job_name=f"mpi-{name}",
                              echo=False, stop_grace=2, profile="ci", **BASE, **extra)
        out[name] = (result, time.monotonic() - t0)
        print(f"\n{name}: {result.status} in {out[name][1]:.1f} s")
    return out


def ranks(result: JobResult) -> dict[int, dict[str, Any]]:
    out = {}
    for name, data in result.model_files().items():
        m = re.fullmatch(r"env-(algo-\d+)-(\d+)\.json", name)
        if m:
            report = json.loads(data)
            report["file_host"] = m.group(1)
            out[int(m.group(2))] = report
    return out


@needs_root_sshd
@pytest.mark.parametrize("name", list(JOBS))
def test_job_completes_through_the_real_toolkit(jobs: dict[str, tuple[JobResult, float]], name: str) -> None:
    result, _ = jobs[name]
    assert result.status == "Completed", result.failure_reason
    assert [h.exit_code for h in result.hosts] == [0, 0]
    log1, log2 = result.log("algo-1"), result.log("algo-2")
    assert "Can connect to host algo-2" in log1  # paramiko key login to the worker's sshd
    assert "Orted process found" in log2  # orted, started by the worker's sshd, seen by psutil
    assert "MPI training job status file found" in log2  # `ssh algo-2 touch /tmp/done.algo-1`
    # The ci profile caps the toolkit's fixed 30-s sleeps; tests/jobs/test_profiles_equivalence.py runs all
    # three in both profiles (exact: not capped) and nox -s bench reports how long the sleeps take.
    assert "toolkit sleeps capped" in log1 and "toolkit sleeps capped" in log2


@needs_root_sshd
@pytest.mark.parametrize("name", list(JOBS))
def test_every_rank_environment(jobs: dict[str, tuple[JobResult, float]], name: str) -> None:
    result, _ = jobs[name]
    seen = ranks(result)
    assert sorted(seen) == [0, 1, 2, 3]
    for rank, r in seen.items():
        env, host = r["env"], f"algo-{rank // 2 + 1}"
        assert r["hostname"] == r["file_host"] == host  # UTS name and the LD_PRELOADed gethostname
        # the toolkit's own rule (sagemaker_training.mpi: LD_PRELOAD=inspect.getfile(gethostname)),
        # applied by the rank inside its host, where the job environment's packages are
        assert env["LD_PRELOAD"] == r["gethostname_file"]
        assert r["sum"] == 10.0 and r["comm_rank"] == rank  # all_reduce across both hosts
        assert env["OMPI_COMM_WORLD_RANK"] == str(rank)
        assert env["OMPI_COMM_WORLD_SIZE"] == "4"
        assert env["OMPI_COMM_WORLD_LOCAL_RANK"] == str(rank % 2)
        assert env["OMPI_COMM_WORLD_LOCAL_SIZE"] == "2"
        # Open MPI's NODE_RANK is the rank among the processes on this node (across jobs), not
        # the index of the node: here it equals the local rank.
        assert env["OMPI_COMM_WORLD_NODE_RANK"] == str(rank % 2)
        assert env["MASTER_ADDR"] == "algo-1" and env["MASTER_PORT"] == "7777"
        assert env["NCCL_SOCKET_IFNAME"] == "eth0"
        assert env["NCCL_DEBUG"] == "INFO"
        remote = rank >= 2  # launched by orted through algo-2's sshd
        assert ("SSH_CONNECTION" in env) == remote
        if name == "mpi":
            # -x SM_*: every rank sees the master's SM_* values (sagemaker-training 5.1.4, mpi.py:
            # the master's mpirun exports every name of the toolkit's environment).
            assert env["SM_CURRENT_HOST"] == "algo-1"
            assert json.loads(env["SM_TRAINING_ENV"])["current_host"] == "algo-1"
            assert "RANK" not in env and "WORLD_SIZE" not in env and "LOCAL_RANK" not in env
            assert not any(k.startswith("SMDATAPARALLEL_") for k in env)
            assert env["SM_HP_MSG"] == MSG
        else:
            # No -x SM_* (smdataparallel.py): local ranks inherit algo-1's, remote ranks read algo-2's
            # own values from the /etc/environment its toolkit wrote (mpi.py, _write_env_vars_to_file)
            # through sshd's pam_env.
            assert env["SM_CURRENT_HOST"] == host
            assert json.loads(env["SM_TRAINING_ENV"])["current_host"] == host
            assert env["SMDATAPARALLEL_USE_HOMOGENEOUS"] == "1"
            assert env["SMDATAPARALLEL_SERVER_ADDR"] == "algo-1"
            assert env["SMDATAPARALLEL_SERVER_PORT"] == "7592"
            assert env["SAGEMAKER_INSTANCE_TYPE"] == "ml.p4d.24xlarge"
            assert env["FI_PROVIDER"] == "efa" and env["RDMAV_FORK_SAFE"] == "1"
            # smddprun (emulated) provides these from OMPI_COMM_WORLD_*.
            assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == "4"
            assert env["LOCAL_RANK"] == str(rank % 2)
            assert env["SM_HP_MSG"] == MSG  # pam_env keeps quotes, spaces and ';' intact here


@needs_root_sshd
@pytest.mark.parametrize("name", list(JOBS))
def test_plan_predicts_the_full_mpirun_argv(jobs: dict[str, tuple[JobResult, float]], name: str,
                                            tmp_path: Path) -> None:
    result, _ = jobs[name]
    req = rq.create(output_path=tmp_path, job_name=f"mpi-{name}", **BASE, **JOBS[name])
    planned, _ = launch_plan(req, get_backend("process"), caller_env={}, job_id="x", scratch=tmp_path)
    log = result.log("algo-1")
    logged = re.search(r"Invoking script with the following command:\s*\n\s*\n(.+)\n", log)
    assert logged, log[-2000:]
    launcher = planned.hosts[0].launcher
    assert launcher is not None and planned.hosts[1].launcher is None
    so = ranks(result)[0]["gethostname_file"]  # the library as the hosts see it (see test_every_rank_environment)
    predicted = " ".join(a.replace(tk.GETHOSTNAME_SO, so) for a in launcher)
    assert logged.group(1).strip() == predicted


def test_prediction_shapes() -> None:
    rc = {"current_host": "algo-1", "hosts": ["algo-1", "algo-2"], "current_instance_type": "ml.c5.xlarge",
          "network_interface_name": "eth0", "current_group_name": "homogeneousCluster",
          "instance_groups": [{"instance_group_name": "homogeneousCluster", "instance_type": "ml.c5.xlarge",
                               "hosts": ["algo-1", "algo-2"]}]}
    hps = {"sagemaker_program": '"t.py"', "sagemaker_mpi_enabled": "true",
           "sagemaker_mpi_custom_mpi_options": '"--NCCL_DEBUG WARN -x FOO=1"'}
    cmd = tk.launcher_command("mpi", rc, hps, num_gpus=0, python="py")
    assert cmd is not None
    assert cmd[:5] == ["mpirun", "--host", "algo-1,algo-2", "-np", "2"]  # pph 1: no ":N"
    assert "NCCL_DEBUG=WARN" in cmd and cmd[cmd.index("FOO=1") - 1] == "-x"
    assert "FI_PROVIDER=efa" not in cmd  # not an EFA type
    assert cmd[-4:] == ["py", "-m", "mpi4py", "t.py"]
    assert cmd[cmd.index("SM_MODULE_DIR") + 2] == "SM_TRAINING_ENV"
    single = dict(rc, hosts=["algo-1"], instance_groups=[dict(rc["instance_groups"][0], hosts=["algo-1"])])
    hps2 = {"sagemaker_program": '"t.py"', "sagemaker_distributed_dataparallel_enabled": "true"}
    cmd2 = tk.launcher_command("smdataparallel", single, hps2, num_gpus=0, python="py", smddprun=False)
    assert cmd2 is not None and "SMDATAPARALLEL_USE_SINGLENODE=1" in cmd2
    assert not any(a.startswith("SMDATAPARALLEL_SERVER") for a in cmd2)
    assert cmd2[cmd2.index("--host") + 1] == "algo-1" and "smddprun" not in cmd2


def test_ssh_material_is_per_job_and_private(tmp_path: Path) -> None:
    require("per-job ssh keys", [] if shutil.which(sshd.KEYGEN) else [f"{sshd.KEYGEN} (openssh-client)"])
    root = sshd.prepare(tmp_path)
    key = (root / "dot-ssh" / "id_ed25519").read_bytes()
    assert sshd.prepare(tmp_path) == root
    assert (root / "dot-ssh" / "id_ed25519").read_bytes() == key  # idempotent within a job
    assert (root / "dot-ssh" / "authorized_keys").read_text() == (root / "dot-ssh" / "id_ed25519.pub").read_text()
    assert oct((root / "etc-ssh" / "ssh_host_ed25519_key").stat().st_mode & 0o777) == "0o600"
    assert oct(root.stat().st_mode & 0o777) == "0o700"
    config = (root / "etc-ssh" / "sshd_config").read_text()
    for line in ("PermitRootLogin prohibit-password", "UsePAM yes", "StrictModes yes", "PidFile none"):
        assert line in config
    other = sshd.prepare(tmp_path / "other")
    assert (other / "dot-ssh" / "id_ed25519").read_bytes() != key  # per job
    # The pam file is derived from the machine's /etc/pam.d/sshd exactly when there is one.
    assert (root / "pam-sshd").is_file() == Path("/etc/pam.d/sshd").is_file()
    if Path("/etc/pam.d/sshd").is_file():
        assert not re.search(r"(?m)^session\s+required\s+pam_loginuid", (root / "pam-sshd").read_text())
    # The rewrite itself, on Debian's line (openssh-server's debian/openssh-server.sshd.pam.in); the
    # DLC Dockerfiles make the same edit with sed (github.com/aws/deep-learning-containers).
    debian = "session    required     pam_loginuid.so\nsession    optional     pam_keyinit.so force revoke\n"
    assert sshd._pam_sshd(debian) == \
        "session    optional     pam_loginuid.so\nsession    optional     pam_keyinit.so force revoke\n"
