"""Helpers for in-host tests: run small scripts as real processes with the in-host site folder."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from emulator.inhost import GPU_BIN, SITE, SMDDP_BIN, SMDDP_SITE

PYTHON = Path(sys.executable)
TORCHRUN = PYTHON.parent / "torchrun"
TIMEOUT_SECONDS = 180

_LAUNCH_VARS = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE",
    "GROUP_RANK", "NODE_RANK", "EMULATOR_DIAG_DIR", "PYTHONPATH",
)  # fmt: skip


def inhost_env(gpus: int = 2, **extra: str) -> dict[str, str]:
    """The environment an emulated host gives its processes (minus /opt/ml)."""
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS and not k.startswith("OMPI_")}
    env.update(
        PYTHONPATH=os.pathsep.join(map(str, (SITE, SMDDP_SITE))),
        EMULATOR_INHOST="1",
        EMULATOR_GPU_COUNT=str(gpus),
        OMP_NUM_THREADS="1",
        PATH=os.pathsep.join([str(GPU_BIN), str(SMDDP_BIN), env.get("PATH", "")]),
        SAGEMAKER_INSTANCE_TYPE="ml.p4d.24xlarge",
    )
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: Prepended to every script: ``say(...)`` prints a line with one write (ranks share stdout).
PRELUDE = "def say(*parts):\n    import os\n    os.write(1, (' '.join(str(p) for p in parts) + '\\n').encode())\n\n"


class Result:
    """A finished run: ``returncode``, ``stdout``, ``stderr``; :meth:`ok` asserts success."""

    def __init__(self, completed: subprocess.CompletedProcess[str]) -> None:
        self.returncode = completed.returncode
        self.stdout = completed.stdout
        self.stderr = completed.stderr

    def ok(self) -> str:
        """stdout of a successful run; on failure, an assertion showing both streams."""
        assert self.returncode == 0, f"exit {self.returncode}\n{self.stdout}\n{self.stderr}"
        return self.stdout


Runner = Callable[..., Result]


@pytest.fixture
def run_script(tmp_path: Path) -> Runner:
    """``run_script(source, nproc=0, gpus=2, **env)``: run ``source`` (plain python when nproc
    is 0, else under ``torchrun --nproc_per_node nproc``) and return the completed process."""

    def run(source: str, *, nproc: int = 0, gpus: int = 2, **extra: str):
        script = tmp_path / "script.py"
        script.write_text(PRELUDE + textwrap.dedent(source))
        if nproc:
            command = [
                str(TORCHRUN), "--nproc_per_node", str(nproc), "--master_addr", "127.0.0.1",
                "--master_port", str(free_port()), str(script),
            ]  # fmt: skip
        else:
            command = [str(PYTHON), str(script)]
        completed = subprocess.run(
            command,
            env=inhost_env(gpus, **extra),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
        )
        return Result(completed)

    return run
