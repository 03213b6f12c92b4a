"""Framework families on the process backend: a 2-host smoke test per family.

Each family the process backend accepts for this interpreter installs its DLC's torch into a job
environment (the PyPI wheel, a CUDA build, with its ``nvidia-*`` wheels: about 3 GB to download
and 5 GB on disk per family). So these tests are marked ``families`` and left out of
``nox -s tests``; ``nox -s families`` runs them (``.ci/run`` calls it last). By default they run
:data:`SMOKE` (the families the tests must cover); ``EMULATOR_TEST_FAMILIES=all`` (or a
comma-separated list of family names) selects others.

Oracle: what the ranks report from inside the hosts (``torch.__version__`` against the torch
release AWS's DLC of the family ships, cited in emulator/job/frameworks.py; the all-reduced sum of
``rank + 1``), and DDP's own promise that every rank holds the same parameters after a step.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import emulator
from emulator.job import frameworks

from .rank_output import marked_json

#: The families whose smoke test always runs in ``nox -s families`` (the process backend refuses
#: every other family unless ``SAGEMAKER_EMULATOR_UNTESTED_FAMILIES=1``; 2.13 is this machine's
#: torch, which the whole suite runs).
SMOKE = ("2.0", "2.2", "2.5", "2.8")


def test_every_family_the_process_backend_accepts_has_a_smoke_test() -> None:
    assert set(frameworks.SMOKE_TESTED) == {*SMOKE, "2.13"}
SELECT_VAR = "EMULATOR_TEST_FAMILIES"

#: DDP on the host's emulated GPU: .cuda(), DDP(device_ids=[local_rank]), an Adam step (torch 2.2's
#: Optimizer asks torch.cuda.is_current_stream_capturing() once CUDA is available), all_reduce.
SCRIPT = """\
import json, os, sys, torch
import torch.distributed as dist
dist.init_process_group("nccl")
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
torch.manual_seed(dist.get_rank())  # different initial weights: DDP broadcasts rank 0's
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1).cuda(), device_ids=[local])
opt = torch.optim.Adam(model.parameters(), lr=0.1)
for _ in range(3):
    x = torch.randn(8, 4).cuda()
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
t = torch.tensor([float(dist.get_rank() + 1)]).cuda()
dist.all_reduce(t)
print("SMOKE " + json.dumps({"torch": torch.__version__, "python": sys.version.split()[0],
      "rank": dist.get_rank(), "world": dist.get_world_size(), "sum": t.item(),
      "params": [p.detach().cpu().flatten().tolist() for p in model.parameters()]}), flush=True)
dist.destroy_process_group()
"""


def _accepted() -> list[frameworks.Family]:
    """The families this interpreter's process backend runs (with the opt-in: also untested ones)."""
    here = sys.version_info[:2]
    return [f for f in frameworks.FAMILIES if f.runs_on(here)]


def _selected() -> list[str]:
    choice = os.environ.get(SELECT_VAR, "")
    if choice == "all":
        return [f.name for f in _accepted()]
    return [n.strip() for n in choice.split(",") if n.strip()] or list(SMOKE)


def _params() -> list[object]:
    accepted = {f.name for f in _accepted()}
    return [pytest.param(name, id=name, marks=pytest.mark.skipif(
        name not in accepted, reason=f"the process backend refuses {name} with Python "
                                     f"{sys.version_info[0]}.{sys.version_info[1]} (no torch wheel)"))
            for name in _selected()]


@pytest.mark.families
@pytest.mark.parametrize("name", _params())
def test_family_runs_two_hosts(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SAGEMAKER_EMULATOR_FRAMEWORK_VERSION", raising=False)  # the suite's "current"
    if name not in SMOKE:
        monkeypatch.setenv(frameworks.UNTESTED_VAR, "1")
    family = frameworks.family(name)
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(SCRIPT)
    result = emulator.run(entry_point="train.py", source_dir=src, instance_count=2, instance_type="ml.g5.xlarge",
                          framework_version=family.default_version, py_version=family.dlc_py[-1],
                          distribution={"torch_distributed": {"enabled": True}}, output_path=tmp_path / "out",
                          job_name=f"family-{name.replace('.', '-')}", echo=False, stop_grace=2)
    assert result.status == "Completed", (result.failure_reason, result.log("algo-1")[-3000:])
    reports = [r for host in ("algo-1", "algo-2") for r in marked_json(result.log(host), "SMOKE ")]
    assert sorted(r["rank"] for r in reports) == [0, 1], reports
    for r in reports:
        assert r["torch"].split("+")[0] == family.torch
        assert r["world"] == 2 and r["sum"] == 3.0
    assert reports[0]["params"] == reports[1]["params"]  # DDP kept the replicas in step
