"""Issue 26, end to end on 2 hosts x 2 emulated GPUs (nccl, torch_distributed, the real toolkit and
torchrun): torch.accelerator, FSDP v1 (``device_id=torch.cuda.current_device()``,
``sync_module_states``) and FSDP2 (``fully_shard`` over ``init_device_mesh("cuda", ...)``) run
unchanged GPU code, and train as DDP does.

Oracle: the same model, seed and global batches trained in this test process by plain single-process
SGD on the whole batch (no emulator, no distribution): data-parallel training of equal slices with
averaged gradients takes the same steps, so every rank's all-reduced mean loss must match it to float
tolerance, for each strategy (``tests/scripts/fsdp_train.py``, whose constants are read here).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

import emulator

SCRIPTS = Path(__file__).parent / "scripts"
WORLD = 4


def _constants() -> dict[str, float]:
    """``STEPS, PER_RANK, LR`` as the script defines them."""
    tree = ast.parse((SCRIPTS / "fsdp_train.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple):
            names = [t.id for t in node.targets[0].elts]  # type: ignore[attr-defined]
            if names == ["STEPS", "PER_RANK", "LR"]:
                return dict(zip(names, ast.literal_eval(node.value)))
    raise AssertionError("STEPS, PER_RANK, LR not found in fsdp_train.py")


def _reference_losses() -> list[float]:
    """Single-process SGD on the whole global batch, as the script seeds it."""
    c = _constants()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=c["LR"])
    generator = torch.Generator().manual_seed(1234)
    losses = []
    for _ in range(int(c["STEPS"])):
        x = torch.randn(WORLD * int(c["PER_RANK"]), 8, generator=generator)
        y = torch.randn(WORLD * int(c["PER_RANK"]), 4, generator=generator)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_fsdp_v1_and_fsdp2_train_as_ddp_on_2x2(tmp_path: Path) -> None:
    result = emulator.run(entry_point="fsdp_train.py", source_dir=SCRIPTS, output_path=tmp_path, job_name="fsdp",
                          instance_count=2, instance_type="ml.g5.12xlarge", gpus_per_host=2,
                          distribution={"torch_distributed": {"enabled": True}}, echo=False, stop_grace=2,
                          profile="ci")
    assert result.status == "Completed", f"{result.failure_reason}\n{result.log_tail('algo-1', 40)}"
    reports = {int(r["rank"]): r for r in (json.loads(v) for k, v in result.model_files().items()
                                           if k.startswith("fsdp-rank-"))}
    assert sorted(reports) == list(range(WORLD))
    expected = _reference_losses()
    for rank, r in reports.items():
        assert (r["accelerator"], r["accelerator_available"], r["accelerator_count"]) == ("cuda", True, 2)
        assert r["device_index"] == r["cuda_current"] == rank % 2
        assert r["device_module_is_cuda"] is True
        assert sorted(r["modes"]) == ["ddp", "fsdp1", "fsdp2"]
        for mode, seen in r["modes"].items():
            assert seen["losses"] == pytest.approx(expected, rel=1e-5, abs=1e-6), (rank, mode)
        fsdp2 = r["modes"]["fsdp2"]
        assert (fsdp2["mesh_device_type"], fsdp2["mesh_backend"]) == ("cuda", "gloo")
        assert (fsdp2["param_type"], fsdp2["param_mesh_device_type"], fsdp2["param_placements"]) == \
            ("DTensor", "cuda", ["Shard(dim=0)"])
        assert fsdp2["local_shard_rows"] == 16 // WORLD  # the first Linear's 16 rows, one slice per rank
    for mode in ("ddp", "fsdp1", "fsdp2"):  # the same on every rank, exactly (an all-reduced value)
        assert len({tuple(r["modes"][mode]["losses"]) for r in reports.values()}) == 1
