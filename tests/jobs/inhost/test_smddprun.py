"""``smddprun`` turns Open MPI's per-rank variables into the ones SMDDP scripts read.

The environment each rank's ``smddprun`` starts with, in a real 2-host SMDataParallel job (the
toolkits on PyPI are the oracle):

- ``SMDATAPARALLEL_SERVER_ADDR=algo-1`` and ``SMDATAPARALLEL_SERVER_PORT=7592``: ``-x`` exports of
  the toolkit's ``mpirun`` argv for more than one host (sagemaker-training 5.1.4,
  ``smdataparallel.py``, ``SMDataParallelRunner._create_command`` and ``_get_mpirun_command``);
- ``MASTER_ADDR=algo-1`` and ``MASTER_PORT=7777``: set in the toolkit's own environment before it
  launches (sagemaker-pytorch-training 3.0.0, ``training.py``, ``_set_distributed_environment``),
  so algo-1's ranks inherit them from ``mpirun`` and the workers' ranks read them from the
  ``/etc/environment`` each worker writes (``mpi.py``, ``_write_env_vars_to_file``) through sshd.

So ``MASTER_ADDR``/``MASTER_PORT`` are always set when ``smddprun`` runs, and it must keep them;
tests/jobs/test_mpi_launch.py checks the same values in every rank of real jobs.
"""

from __future__ import annotations

import subprocess
import sys

from emulator.inhost import SMDDP_BIN

#: What a rank of rank 5 (local rank 1) in an 8-rank, 2-host SMDataParallel job starts with.
REAL_JOB_ENV = {
    "PATH": "/usr/bin:/bin",
    "OMPI_COMM_WORLD_RANK": "5",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_SIZE": "8",
    "SMDATAPARALLEL_SERVER_ADDR": "algo-1",
    "SMDATAPARALLEL_SERVER_PORT": "7592",
    "MASTER_ADDR": "algo-1",
    "MASTER_PORT": "7777",
}
SHOW = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "SMDATAPARALLEL_LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK")


def _smddprun(env: dict[str, str]) -> list[str]:
    code = f"import os; print(*[f'{{k}}={{os.environ.get(k)}}' for k in {SHOW!r}])"
    return subprocess.run([str(SMDDP_BIN / "smddprun"), sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True, timeout=30).stdout.split()


def test_smddprun_sets_rank_variables_and_keeps_the_toolkits_master() -> None:
    out = _smddprun(REAL_JOB_ENV)
    assert out == [
        "RANK=5", "LOCAL_RANK=1", "WORLD_SIZE=8", "SMDATAPARALLEL_LOCAL_RANK=1",
        "MASTER_ADDR=algo-1", "MASTER_PORT=7777", "NODE_RANK=None",
    ]  # fmt: skip


def test_smddprun_overrides_stale_rank_variables() -> None:
    """RANK/LOCAL_RANK/WORLD_SIZE must match MPI's view even if the caller's environment had others."""
    out = _smddprun({**REAL_JOB_ENV, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"})
    assert out[:3] == ["RANK=5", "LOCAL_RANK=1", "WORLD_SIZE=8"]


def test_smddprun_outside_mpi_fails_clearly() -> None:
    result = subprocess.run(
        [str(SMDDP_BIN / "smddprun"), "true"], env={"PATH": "/usr/bin:/bin"}, capture_output=True,
        text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 2
    assert "must run under Open MPI's mpirun" in result.stderr
