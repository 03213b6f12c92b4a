"""Collectives out of step, end to end: hosts issue broadcast and all_reduce in different orders;
the job is stopped and the first divergent collective is named with the ranks on each side.
Expected lines come from the script's own text."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..conftest import require_mpi
from .test_stacks_jobs import SCRIPTS, SMDDP, TORCH_DIST, line, run_until_warm

SCRIPT = (SCRIPTS / "out_of_step.py").read_text()
EXPECTED = (f"ranks 0, 1 (algo-1) issued all_reduce (out_of_step.py:{line(SCRIPT, '# ALGO-1 FIRST')} in <module>) "
            f"as collective #2 of the default group while ranks 2, 3 issued broadcast "
            f"(out_of_step.py:{line(SCRIPT, '# ALGO-2 FIRST')} in <module>)")


def _check(result) -> None:  # type: ignore[no-untyped-def]
    assert result.status in ("Stopped", "Failed")  # gloo may also give up on the mismatch by itself
    (finding,) = [d for d in result.diagnostics if d.kind.startswith("collective")]
    assert (finding.kind, finding.message, finding.hosts) == ("collective-mismatch", EXPECTED, ("algo-1", "algo-2"))
    emulator_fields = result.description["Emulator"]
    assert {"Kind": "collective-mismatch", "Message": EXPECTED, "Hosts": ["algo-1", "algo-2"]} in \
        emulator_fields["Diagnostics"]
    last = {r["Rank"]: r["Last"]["default"]["Op"] for r in emulator_fields["Collectives"]}
    assert last == {0: "all_reduce", 1: "all_reduce", 2: "broadcast", 3: "broadcast"}


def test_out_of_step_torch_distributed(tmp_path: Path) -> None:
    result, console = run_until_warm(tmp_path, "out-of-step", entry_point="out_of_step.py", distribution=TORCH_DIST)
    _check(result)
    assert f"diagnostic (collective-mismatch): {EXPECTED}" in console


@pytest.mark.docker
def test_out_of_step_on_docker(tmp_path: Path, docker_ready: None) -> None:
    result, _ = run_until_warm(tmp_path, "out-of-step-docker", backend="docker", entry_point="out_of_step.py",
                               distribution=TORCH_DIST)
    _check(result)


def test_out_of_step_under_mpirun_on_smddp(tmp_path: Path) -> None:
    require_mpi()
    result, _ = run_until_warm(tmp_path, "out-of-step-mpi", entry_point="out_of_step.py", distribution=SMDDP,
                               hyperparameters={"backend": "smddp"}, short_toolkit_sleeps=True)
    _check(result)
