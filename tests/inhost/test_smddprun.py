"""``smddprun`` turns Open MPI's per-rank variables into the ones SMDDP scripts read."""

from __future__ import annotations

import subprocess
import sys

from emulator.inhost import SMDDP_BIN


def test_smddprun_sets_rank_variables() -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "OMPI_COMM_WORLD_RANK": "5",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_SIZE": "8",
        "SMDATAPARALLEL_SERVER_ADDR": "algo-1",
        "RANK": "0",
    }
    code = (
        "import os; print(*[f'{k}={os.environ.get(k)}' for k in "
        "('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'SMDATAPARALLEL_LOCAL_RANK', 'MASTER_ADDR', "
        "'MASTER_PORT', 'NODE_RANK')])"
    )
    out = subprocess.run(
        [str(SMDDP_BIN / "smddprun"), sys.executable, "-c", code],
        env=env, capture_output=True, text=True, check=True, timeout=30,
    ).stdout.split()  # fmt: skip
    assert out == [
        "RANK=5", "LOCAL_RANK=1", "WORLD_SIZE=8", "SMDATAPARALLEL_LOCAL_RANK=1",
        "MASTER_ADDR=algo-1", "MASTER_PORT=7592", "NODE_RANK=None",
    ]  # fmt: skip


def test_smddprun_outside_mpi_fails_clearly() -> None:
    result = subprocess.run(
        [str(SMDDP_BIN / "smddprun"), "true"], env={"PATH": "/usr/bin:/bin"}, capture_output=True,
        text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 2
    assert "must run under Open MPI's mpirun" in result.stderr
