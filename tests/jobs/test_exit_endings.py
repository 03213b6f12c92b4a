"""Correct script endings end ``Completed``; a death at interpreter exit is explained.

The corpus (``tests/scripts/endings.py``): each rank of a 2-host job ends one way (no
``destroy_process_group()``, destroy, ``sys.exit(0)`` mid-way, ``os._exit(0)``, a daemon thread
still running, DataLoader workers still alive) as its real ending; ``shift`` spreads the endings
so that every distribution has a rank that never destroys its emulated nccl/smddp group, and
every ending runs under at least two distributions. Lightning's own teardown: ``test_lightning_fit_ends_completed``.

Expected values: the endings are correct scripts, which exit 0 on GPUs (torch's
``~ProcessGroupNCCL`` tears the group down, warning on the first rank of each node); torch's
warning text is ``_sm_emulator_teardown.NCCL_NOT_DESTROYED``, copied from ProcessGroupNCCL.cpp.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from emulator.diagnostics.exitdeaths import KIND

SCRIPTS = Path(__file__).parents[1] / "scripts"
#: Scripts that import Lightning have a source dir of their own: the preflight asks every job whose
#: source dir imports Lightning for it (.ci/unprivileged's Python has none).
LIGHTNING_SCRIPTS = Path(__file__).parents[1] / "scripts_lightning"
sys.path.insert(0, str(Path(__file__).parents[2] / "emulator" / "inhost" / "site"))
from _sm_emulator_teardown import NCCL_NOT_DESTROYED  # noqa: E402

sys.path.pop(0)
ENDINGS = ("no-destroy", "destroy", "sys-exit", "os-exit", "daemon-thread", "dataloader-workers")
#: distribution → (distribution argument, GPUs per host, shift, backend the script asks for)
JOBS: dict[str, tuple[Any, int, int, str]] = {
    "torch_distributed": ({"torch_distributed": {"enabled": True}}, 2, 0, "nccl"),
    "pytorchddp": ({"pytorchddp": {"enabled": True}}, 2, 3, "nccl"),
    "smdistributed": ({"smdistributed": {"dataparallel": {"enabled": True}}}, 2, 4, "smddp"),
    "mpi": ({"mpi": {"enabled": True, "processes_per_host": 2}}, 2, 5, "cuda:nccl,cpu:gloo"),
    "plain": (None, 1, 0, "nccl"),
}


def _endings(result: Any) -> dict[int, dict[str, Any]]:
    files = result.model_files()
    return {json.loads(data)["rank"]: json.loads(data) for name, data in files.items() if name.startswith("ending-")}


def _run_corpus(sagemaker_job: Any, name: str, backend: str) -> Any:
    distribution, gpus, shift, asked = JOBS[name]
    result = sagemaker_job(entry_point="endings.py", source_dir=SCRIPTS, instance_type="ml.p4d.24xlarge",
                           instance_count=2, gpus_per_host=gpus, distribution=distribution,
                           hyperparameters={"shift": shift, "backend": asked}, backend=backend, stop_grace=2)
    world = 2 * gpus if name != "plain" else 2
    assert result.status == "Completed", (result.failure_reason, result.diagnostics, result.log_tail("algo-1", 40))
    done = _endings(result)
    assert sorted(done) == list(range(world))  # every rank did its work before its ending
    assert {d["ending"] for d in done.values()} == {ENDINGS[(r + shift) % len(ENDINGS)] for r in range(world)}
    assert all(d["sum"] == world for d in done.values())
    logs = result.log("algo-1") + result.log("algo-2")
    assert re.findall("terminate called without an active exception", logs) == []
    # torch's NCCL warning, on the first rank of each node, for the ranks that never destroyed it
    warned = re.findall(r"\[rank(\d+)\]:\[W\d{4} [\d:.]+ ProcessGroupNCCL\.cpp\] Warning: "
                        + re.escape(NCCL_NOT_DESTROYED), logs)
    expected = sorted(str(r) for r, d in done.items() if d["ending"] in ("no-destroy", "daemon-thread",
                                                                         "dataloader-workers", "sys-exit")
                      and asked != "smddp" and r % gpus == 0)
    assert sorted(warned) == expected
    assert [d for d in result.diagnostics if d.kind == KIND] == []
    return result


@pytest.mark.parametrize("name", list(JOBS))
def test_correct_endings_complete_on_the_process_backend(sagemaker_job: Any, name: str) -> None:
    _run_corpus(sagemaker_job, name, "process")


@pytest.mark.docker
@pytest.mark.parametrize("name", ["torch_distributed", "pytorchddp"])
def test_correct_endings_complete_on_the_docker_backend(sagemaker_job: Any, name: str, docker_ready: None) -> None:
    _run_corpus(sagemaker_job, name, "docker")


def test_lightning_fit_ends_completed(sagemaker_job: Any) -> None:
    """Lightning's own teardown (an atexit destroy, registered after init_process_group, so it runs
    before the emulator's): no abort, and no NCCL warning, as Lightning destroyed the group."""
    pytest.importorskip("pytorch_lightning")
    result = sagemaker_job(entry_point="lightning_ending.py", source_dir=LIGHTNING_SCRIPTS,
                           instance_type="ml.p4d.24xlarge",
                           instance_count=2, gpus_per_host=1, distribution={"torch_distributed": {"enabled": True}},
                           stop_grace=2)
    assert result.status == "Completed", (result.failure_reason, result.log_tail("algo-1", 40))
    fits = {name: json.loads(data) for name, data in result.model_files().items() if name.startswith("fit-")}
    assert sorted(fits) == ["fit-0.json", "fit-1.json"] and all(f["world"] == 2 for f in fits.values())
    logs = result.log("algo-1") + result.log("algo-2")
    assert re.findall("terminate called without an active exception", logs) == []
    assert re.findall(re.escape(NCCL_NOT_DESTROYED), logs) == []


ABORT_AT_EXIT = """\
import atexit
import os

import torch
import torch.distributed as dist


def give_up():
    os.abort()


dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
dist.destroy_process_group()
open(os.path.join(os.environ["SM_MODEL_DIR"], f"done-{os.environ['RANK']}"), "w").write(str(t.item()))
atexit.register(give_up)
"""


def test_a_death_at_interpreter_exit_is_explained(sagemaker_job: Any, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(ABORT_AT_EXIT)
    result = sagemaker_job(entry_point="train.py", source_dir=src, instance_type="ml.p4d.24xlarge", instance_count=2,
                           gpus_per_host=1, distribution={"torch_distributed": {"enabled": True}}, stop_grace=2)
    assert result.status == "Failed"
    assert any(name.startswith("done-") for name in result.model_files())  # the work was done
    # SageMaker's reason stays the toolkit's: a bare ExecuteUserScriptError
    assert result.failure_reason.startswith("AlgorithmError: ExecuteUserScriptError:\nExitCode 1\nErrorMessage")
    found = [d for d in result.diagnostics if d.kind == KIND]
    assert found and {d.hosts for d in found} <= {("algo-1",), ("algo-2",)}
    first = next(d for d in found if d.hosts == (result.first_failure,))
    assert re.search(r"rank \d \(pid \d+, `train\.py`\) ran the script to its end and then died at interpreter "
                     r"exit, after the script's last line \(Aborted; in train\.py:9 in give_up\)", first.message)
    assert {"Kind": KIND, "Message": first.message, "Hosts": [result.first_failure]} in \
        result.description["Emulator"]["Diagnostics"]


def test_a_script_that_fails_before_its_end_is_not_a_death_at_exit(sagemaker_job: Any, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("import os\nos.abort()\n")
    result = sagemaker_job(entry_point="train.py", source_dir=src, instance_type="ml.m5.xlarge")
    assert result.status == "Failed"
    assert [d for d in result.diagnostics if d.kind == KIND] == []


#: ``ended-`` file of a rank that gloo's teardown aborted (recorded from a real torchrun run of a gloo
#: script without destroy_process_group(), torch 2.13 CPU; the abort cannot be triggered on demand).
GLOO_ABORT = """\
{"host": "algo-1", "pid": 61, "time": 10.0, "rank": "3", "argv": ["train.py"]}
Fatal Python error: Aborted

Thread 0x00007ff6b606cb80 (most recent call first):
  <no Python frame>

Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)
"""


def test_a_gloo_abort_in_a_cpp_thread_is_explained(tmp_path: Path) -> None:
    from emulator.diagnostics import exitdeaths

    (tmp_path / "ended-algo-1-61.txt").write_text(GLOO_ABORT)
    (tmp_path / "ended-algo-1-62.txt").write_text('{"host": "algo-1", "pid": 62, "time": 10.0, "rank": "2"}\n')
    log = tmp_path / "algo-1.log"
    log.write_text("[1,0]<stdout>:ok\nterminate called without an active exception\n")
    records = exitdeaths.load(tmp_path)
    assert [(r["pid"], r["fatal"], r["where"]) for r in records] == [(61, "Aborted", None)]  # 62 ended cleanly
    (found,) = exitdeaths.explain(records, {"algo-1": log})
    assert found.hosts == ("algo-1",) and "rank 3 (pid 61, `train.py`)" in found.message
    assert "a C++ thread" in found.message and f"1 × '{exitdeaths.TERMINATE}' in {log}" in found.message
    assert "call destroy_process_group()" in found.message
