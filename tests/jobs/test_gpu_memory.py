"""Emulated GPUs hold memory as CUDA does: a DDP job's peaks, and a T4 that runs out.

Oracles, independent of the emulator's accounting:

- DDP with Adam (``tests/scripts_memory/ddp_adam.py``: ``LAYERS`` Linear(WIDTH, WIDTH) in fp32, so
  P = LAYERS x (WIDTH^2 + WIDTH) parameters, every tensor a multiple of 512 bytes): at Adam's step each
  rank's GPU holds the weights, the gradients, DDP's gradient buckets (``gradient_as_bucket_view``
  is off by default: a second copy) and Adam's two states, 5 x 4 B x P; its peak lies between that
  and that plus one parameter-sized temporary list of the foreach step (4 B x P) plus the activations
  (below: every layer's input and output, forward and backward, for BATCH rows). The script's own
  ``torch.cuda.max_memory_allocated()`` must equal what ``job.json`` reports for its rank.
- A T4 (``ml.g4dn.xlarge``) holds 15,835,660,288 bytes as CUDA reports them (deviceQuery), 14.75 GiB:
  a script that keeps allocating 1 GiB tensors gets 14 of them, then CUDA's out-of-memory error.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import emulator
from emulator.job.instance_types import GPU_MEMORY

SCRIPTS = Path(__file__).parents[1] / "scripts_memory"
WORLD = 4
GIB = 1 << 30


def _constants() -> dict[str, int]:
    """``LAYERS, WIDTH, BATCH, STEPS`` as the script defines them."""
    for node in ast.parse((SCRIPTS / "ddp_adam.py").read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple):
            names = [t.id for t in node.targets[0].elts]  # type: ignore[attr-defined]
            if names == ["LAYERS", "WIDTH", "BATCH", "STEPS"]:
                return dict(zip(names, ast.literal_eval(node.value)))
    raise AssertionError("LAYERS, WIDTH, BATCH, STEPS not found in ddp_adam.py")


def test_ddp_ranks_report_the_peak_their_script_sees(tmp_path: Path) -> None:
    c = _constants()
    params = c["LAYERS"] * (c["WIDTH"] ** 2 + c["WIDTH"])
    states = 5 * 4 * params  # weights, gradients, DDP buckets, Adam's exp_avg and exp_avg_sq
    # activations: each layer's input and ReLU output kept for backward, and their gradients, + the
    # batch and the loss's scalars (512 bytes each at most)
    activations = 4 * (2 * c["LAYERS"] + 1) * c["BATCH"] * c["WIDTH"] * 4 + 64 * 512
    result = emulator.run(entry_point="ddp_adam.py", source_dir=SCRIPTS, output_path=tmp_path / "out",
                          job_name="gpu-memory-ddp", instance_count=2, instance_type="ml.g5.12xlarge",
                          gpus_per_host=2, distribution={"torch_distributed": {"enabled": True}}, echo=False,
                          stop_grace=2, profile="ci", gpu_memory="count")
    assert result.status == "Completed", result.failure_reason
    own = {int(r["rank"]): r for r in (json.loads(v) for k, v in result.model_files().items()
                                       if k.startswith("memory-rank"))}
    reported = {row["Rank"]: row for row in result.description["Emulator"]["GpuMemory"]["Ranks"]}
    assert sorted(own) == sorted(reported) == list(range(WORLD))
    for rank, mine in own.items():
        assert mine["params"] == params
        assert mine["weights"] == 4 * params
        assert reported[rank]["PeakAllocatedBytes"] == mine["max_allocated"] == mine["stats_peak"]
        assert reported[rank]["PeakReservedBytes"] == mine["max_reserved"] >= mine["max_allocated"]
        assert states <= mine["max_allocated"] <= states + 4 * params + activations, (rank, mine)
        assert reported[rank]["CapacityBytes"] == GPU_MEMORY["NVIDIA A10G"]
        assert reported[rank]["Host"] == ("algo-1" if rank < 2 else "algo-2") and reported[rank]["Gpu"] == rank % 2


def test_a_t4_runs_out_after_the_gib_it_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    holds = GPU_MEMORY["Tesla T4"] // GIB  # 14 whole GiB of 14.75
    result = emulator.run(entry_point="fill_gpu.py", source_dir=SCRIPTS, output_path=tmp_path / "out",
                          job_name="gpu-memory-oom", instance_type="ml.g4dn.xlarge", echo=True, stop_grace=2,
                          profile="ci", gpu_memory="count")
    console = capsys.readouterr().out
    assert result.status == "Failed"
    log = result.log("algo-1")
    assert f"holding {holds} GiB" in log and f"holding {holds + 1} GiB" not in log
    text = ("CUDA out of memory. Tried to allocate 1024.00 MiB. GPU 0 has a total capacity of 14.75 GiB of which ")
    assert text in str(result.failure_reason)
    # the exception's name as the toolkit quotes it ("OutOfMemoryError", with or without "torch.":
    # the toolkit's ErrorMessage keeps what its scan of stderr picked, which varied between runs)
    assert "OutOfMemoryError" in str(result.failure_reason)
    [row] = result.description["Emulator"]["GpuMemory"]["Ranks"]
    assert (row["Rank"], row["Host"], row["Gpu"]) == (0, "algo-1", 0)
    assert row["PeakAllocatedBytes"] == holds * GIB and text in row["OutOfMemory"]
    assert "rank 0 (algo-1, GPU 0): peak 14.00 GiB allocated" in console and "OUT OF MEMORY" in console
