"""The suite's ``xdist_group`` marks hold: under ``--dist loadgroup`` one worker runs a whole group.

``nox -s tests`` runs ``pytest -n 3 --dist loadgroup``, and some modules rely on their group: the
docker reaper tests and test_kept's ``python -m emulator reap`` must not run beside each other (a
machine-wide reap removes the dead owner's containers and networks the reaper tests make: CI failed
on that), and test_mpi_launch and test_replay_moto share one module fixture per group. pytest 9.2
silently stopped honouring the marks (pytest-xdist#1386; constraints.txt keeps ``pytest<9.2``), so
this test runs the installed pytest and pytest-xdist on two grouped tests of a module of its own, with
two workers, and fails when they ran on different ones. Oracle: the workers' own names
(``PYTEST_XDIST_WORKER``, set by pytest-xdist in each worker).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MODULE = '''
import os
from pathlib import Path

import pytest

OUT = Path(__file__).with_name("workers")


@pytest.mark.xdist_group("one")
@pytest.mark.parametrize("n", range(4))
def test_grouped(n):
    with OUT.open("a") as f:
        f.write(f"{n} {os.environ['PYTEST_XDIST_WORKER']}\\n")
'''


def test_one_worker_runs_a_whole_group(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(MODULE)
    (tmp_path / "conftest.py").write_text("")  # its own rootdir: none of this suite's conftest
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
                           "-q", "--rootdir", str(tmp_path), str(tmp_path / "test_grouped.py")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    ran = dict(line.split() for line in (tmp_path / "workers").read_text().splitlines())
    assert sorted(ran) == ["0", "1", "2", "3"]
    assert len(set(ran.values())) == 1, (
        f"the four tests of one xdist_group ran on workers {sorted(set(ran.values()))}: this pytest "
        "ignores xdist_group under --dist loadgroup (pytest-xdist#1386); keep pytest<9.2 in constraints.txt")
