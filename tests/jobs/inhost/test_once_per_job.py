"""Messages every process of a job would print are printed once per job: "torch X is not the
pinned Y" came 13 times from one 8-rank job (the toolkit, torchrun and each rank of each host)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SCRIPT = """
import _sm_emulator_patches as P

P._INSTALLED["torch"] = "2.3.1+cpu"  # the job's torch is not the pinned one
patch = next(p for p in P.REGISTRY if P.pinned_distribution(p)[0] == "torch" and not p.needs)

def target(*args, **kwargs):  # as that torch has it: another signature than the pinned one's
    return None

for _ in range(2):
    assert P._check(patch, target)  # patched as for the pinned version
say("checked")
"""


def test_other_torch_is_reported_once_per_job(run_script: Any, tmp_path: Path) -> None:
    diag = tmp_path / "diagnostics"  # shared by every host of a job, as the backends mount it
    diag.mkdir()
    hosts = [run_script(SCRIPT, nproc=3, EMULATOR_DIAG_DIR=str(diag)) for _ in range(2)]  # 2 hosts x 3 ranks
    assert all(h.returncode == 0 for h in hosts), [h.stderr[-2000:] for h in hosts]
    assert sum(h.stdout.count("checked") for h in hosts) == 6
    lines = [line for h in hosts for line in h.stderr.splitlines() if "is not the pinned" in line]
    assert len(lines) == 1, lines
    assert "torch 2.3.1+cpu is not the pinned 2.13.0" in lines[0]


def test_outside_a_job_each_process_says_it(run_script: Any) -> None:
    """Without the job's diagnostics folder (a bare interpreter), nothing is suppressed."""
    result = run_script(SCRIPT, nproc=2, EMULATOR_DIAG_DIR="")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr.count("is not the pinned") == 2
