"""Negative examples: mistakes users make on real GPU jobs, and the failure they meet there.

Each test runs a small script from ``tests/examples_negative/`` as a real 2-host job and asserts
what the emulator reports: a diagnostic (``result.diagnostics``) or the job's ``FailureReason``.
The ``mpi``/``smdistributed`` tests need the MPI launch (mpirun over ssh); if it is broken they
fail, naming the job's failure reason, rather than skip.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import emulator
from emulator.job.result import JobResult

SCRIPTS = Path(__file__).parents[1] / "examples_negative"
TWO_BY_TWO: dict[str, Any] = dict(source_dir=str(SCRIPTS), instance_type="ml.p4d.24xlarge",
                                  instance_count=2, gpus_per_host=2, echo=False, stop_grace=5, profile="ci")
SMDDP = {"smdistributed": {"dataparallel": {"enabled": True}}}


def _run(tmp_path: Path, entry_point: str, **kwargs: Any) -> JobResult:
    options = {**TWO_BY_TWO, **kwargs}
    return emulator.run(entry_point=entry_point, output_path=str(tmp_path), **options)


def _kinds(result: JobResult) -> list[str]:
    return [d.kind for d in result.diagnostics]


def _explain(result: JobResult) -> str:
    return (f"status={result.status} failure_reason={result.failure_reason!r} "
            f"diagnostics={result.diagnostics}\n--- algo-1 ---\n{result.log_tail('algo-1', 30)}")


@pytest.mark.slow
def test_mpi_script_ignoring_ompi_vars_is_a_rank_clash(tmp_path: Path) -> None:
    """Under ``mpi`` nothing sets RANK: every process is rank 0 of its own group."""
    result = _run(tmp_path, "ignore_ompi.py",
                  distribution={"mpi": {"enabled": True, "processes_per_host": 2}})
    assert "duplicate-rank" in _kinds(result), _explain(result)
    clash = next(d for d in result.diagnostics if d.kind == "duplicate-rank")
    assert "rank 0" in clash.message and set(clash.hosts) == {"algo-1", "algo-2"}


@pytest.mark.slow
def test_wrong_num_nodes_is_a_sampler_mismatch(tmp_path: Path) -> None:
    """``num_nodes=1`` on two hosts: Lightning's sampler splits the data for 2 ranks, not 4."""
    result = _run(tmp_path, "lightning_smddp.py", distribution=SMDDP,
                  hyperparameters={"num-nodes": 1})
    assert {"sampler-mismatch", "sampler-rank-mismatch"} & set(_kinds(result)), _explain(result)


@pytest.mark.slow
def test_sync_dist_under_smddp_fails_with_reduce_op_error(tmp_path: Path) -> None:
    """``self.log(..., sync_dist=True)`` all-reduces with ReduceOp.AVG, which SMDDP refuses."""
    result = _run(tmp_path, "lightning_smddp.py", distribution=SMDDP,
                  hyperparameters={"sync-dist": 1})
    assert result.status == "Failed", _explain(result)
    assert "SMDDP does not support: ReduceOp" in (result.failure_reason or ""), _explain(result)


@pytest.mark.slow
def test_subgroup_under_smddp_fails(tmp_path: Path) -> None:
    """``dist.new_group`` with the smddp backend in a DDP job fails with SMDDP's error."""
    result = _run(tmp_path, "smddp_subgroup.py", distribution=SMDDP)
    assert result.status == "Failed", _explain(result)
    assert "new_group" in (result.failure_reason or ""), _explain(result)


@pytest.mark.slow
def test_fit_then_test_with_aws_environment_raises_world_size_keyerror(tmp_path: Path) -> None:
    """``LightningEnvironment.teardown`` after ``fit`` deletes WORLD_SIZE; ``test`` then reads it."""
    result = _run(tmp_path, "lightning_smddp.py", distribution=SMDDP,
                  hyperparameters={"run-test": 1})
    assert result.status == "Failed", _explain(result)
    assert "KeyError" in (result.failure_reason or "") and "WORLD_SIZE" in (result.failure_reason or ""), \
        _explain(result)


def test_unsupported_cuda_call_says_not_emulated(tmp_path: Path) -> None:
    """``torch.cuda.CUDAGraph`` is outside the emulation boundary and says so."""
    result = _run(tmp_path, "cuda_graph.py", instance_type="ml.p3.2xlarge", instance_count=1,
                  gpus_per_host=None)
    assert result.status == "Failed", _explain(result)
    assert "not emulated" in (result.failure_reason or ""), _explain(result)
