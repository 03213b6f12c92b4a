"""MPI-family jobs on the process backend WITHOUT root: OpenSSH's sshd cannot run in an
unprivileged user namespace (it cannot ``setgroups``), so every host runs the sshd stand-in
(``emulator/inhost/site/_sm_emulator_sshd.py``, mounted over ``/usr/sbin/sshd``) and nothing of the
toolkit is patched: its ``sshd -D``, its paramiko probe, its ``ssh HOST touch`` and Open MPI's
``ssh`` launch of ``orted`` all run unchanged.

Skipped as root (root gets OpenSSH's sshd, see test_mpi_launch.py). CI runs this file as an
ordinary user through ``.ci/unprivileged``, where a missing mpirun or mpi4py fails the tests
(``CI=true``; see ``require`` in conftest.py) instead of skipping them.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

import emulator
from emulator.job.result import JobResult

from ..conftest import require_mpi

SCRIPTS = Path(__file__).parents[1] / "scripts"
BASE = dict(entry_point="mpi_env_report.py", source_dir=SCRIPTS, instance_count=2,
            instance_type="ml.p4d.24xlarge", gpus_per_host=2, short_toolkit_sleeps=True)
JOBS: dict[str, dict[str, Any]] = {
    "mpi": dict(distribution={"mpi": {"enabled": True, "processes_per_host": 2}},
                hyperparameters={"mode": "mpi"}),
    "pytorchddp": dict(distribution={"pytorchddp": {"enabled": True}}, hyperparameters={"mode": "ddp"}),
}

pytestmark = pytest.mark.skipif(
    os.geteuid() == 0, reason="the sshd stand-in is for non-root (root runs OpenSSH's sshd; CI runs this file "
    "as a non-root user through .ci/unprivileged)")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, JobResult]:
    require_mpi()
    return {name: emulator.run(output_path=tmp_path_factory.mktemp(name), job_name=f"nonroot-{name}",
                               echo=False, stop_grace=2, **BASE, **extra)
            for name, extra in JOBS.items()}


def _ranks(result: JobResult) -> dict[int, dict[str, Any]]:
    out = {}
    for name, data in result.model_files().items():
        m = re.fullmatch(r"env-(algo-\d+)-(\d+)\.json", name)
        if m:
            report = json.loads(data)
            report["file_host"] = m.group(1)
            out[int(m.group(2))] = report
    return out


@pytest.mark.parametrize("name", list(JOBS))
def test_completes_through_the_standin(jobs: dict[str, JobResult], name: str) -> None:
    result = jobs[name]
    assert result.status == "Completed", result.failure_reason
    assert [h.exit_code for h in result.hosts] == [0, 0]
    log1, log2 = result.log("algo-1"), result.log("algo-2")
    # The toolkit's own mpirun argv, unchanged, in algo-1's log.
    assert re.search(r"mpirun --host algo-1:2,algo-2:2 -np 4 --allow-run-as-root", log1)
    assert "Can connect to host algo-2" in log1  # the toolkit's paramiko key login, unpatched
    assert "Orted process found" in log2  # orted, started over ssh by mpirun, seen by psutil
    # The toolkit's own `ssh algo-2 touch /tmp/done.algo-1` succeeded, and algo-2 saw the file.
    assert "CompletedProcess(args=['ssh', 'algo-2', 'touch', '/tmp/done.algo-1'], returncode=0" in log1
    assert "MPI training job status file found" in log2


@pytest.mark.parametrize("name", list(JOBS))
def test_every_rank(jobs: dict[str, JobResult], name: str) -> None:
    seen = _ranks(jobs[name])
    assert sorted(seen) == [0, 1, 2, 3]
    for rank, r in seen.items():
        env, host = r["env"], f"algo-{rank // 2 + 1}"
        assert r["hostname"] == r["file_host"] == host
        assert r["sum"] == 10.0 and r["comm_rank"] == rank  # all_reduce across both hosts
        assert env["OMPI_COMM_WORLD_RANK"] == str(rank)
        assert env["OMPI_COMM_WORLD_SIZE"] == "4"
        assert env["OMPI_COMM_WORLD_LOCAL_RANK"] == str(rank % 2)
        assert env["OMPI_COMM_WORLD_LOCAL_SIZE"] == "2"
        assert env["OMPI_COMM_WORLD_NODE_RANK"] == str(rank % 2)
        assert env["MASTER_ADDR"] == "algo-1" and env["MASTER_PORT"] == "7777"
        assert env["NCCL_SOCKET_IFNAME"] == "eth0"
        remote = rank >= 2  # launched by orted, which algo-2's sshd stand-in started
        assert ("SSH_CONNECTION" in env) == remote
        assert not {"EMULATOR_NO_SSHD", "EMULATOR_AGENT_SOCKET", "OMPI_MCA_plm_rsh_agent"} & set(env)  # gone
        if name == "mpi":
            assert env["SM_CURRENT_HOST"] == "algo-1"  # -x SM_*: the master's values everywhere
        else:
            # No -x SM_*: remote ranks get algo-2's own values from its /etc/environment, read as
            # sshd's pam_env reads it (the stand-in's login environment).
            assert env["SM_CURRENT_HOST"] == host
            assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == "4"
