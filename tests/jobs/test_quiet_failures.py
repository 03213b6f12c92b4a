"""Quiet failures end to end: a job that Completes although its worker processes died."""

from __future__ import annotations

from pathlib import Path

import emulator

#: Like the PyTorch toolkit's own test script ``distributed_operations.py`` run on a CPU instance:
#: workers fail on nccl, the script still writes its success file and exits 0.
WORKERS = """\
import multiprocessing
import os

import torch.distributed as dist


def worker(rank):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29511")
    dist.init_process_group("nccl", rank=rank, world_size=2)


if __name__ == "__main__":
    workers = [multiprocessing.Process(target=worker, args=(r,)) for r in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    open("/opt/ml/model/success", "w").close()
"""
HANDLED = """\
import traceback
try:
    raise ConnectionError("first download attempt failed; retrying")
except ConnectionError:
    traceback.print_exc()
print("done")
"""


def _run(tmp_path: Path, name: str, source: str) -> emulator.job.result.JobResult:  # type: ignore[name-defined]
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(source)
    return emulator.run(entry_point="train.py", source_dir=src, instance_type="ml.m5.xlarge",
                        output_path=tmp_path / "out", job_name=name, echo=False)


def test_completed_job_whose_workers_died_gets_a_warning(tmp_path: Path) -> None:
    result = _run(tmp_path, "workers-died", WORKERS)
    assert result.status == "Completed" and "success" in result.model_files()
    (warning,) = [w for w in result.warnings if "the job Completed although" in w]
    assert warning.startswith("algo-1: ")
    assert warning.count("multiprocessing child 'Process-") == 2 and "exited 1" in warning
    assert result.description["Emulator"]["Warnings"] == list(result.warnings)


def test_a_handled_traceback_is_not_a_failure(tmp_path: Path) -> None:
    result = _run(tmp_path, "handled", HANDLED)
    assert result.status == "Completed"
    assert "ConnectionError: first download attempt failed" in result.log("algo-1")
    assert result.warnings == ()
