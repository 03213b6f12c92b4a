"""CUDA streams end to end: a DDP training loop using CUDA streams, events and NVTX completes on 2 hosts
x 2 emulated GPUs (nccl, torch_distributed, the real toolkit and torchrun) with plausible timings.

Each rank writes a JSON report into ``SM_MODEL_DIR`` (``tests/scripts/cuda_streams.py``); the test
reads them from model.tar.gz. Oracles: DDP all-reduces gradients, so the trained parameters are
the same on every rank although each rank's batches (seeded by rank) and losses differ; timings
are only checked for plausibility: each
step non-negative, times since the start non-decreasing and within the wall-clock time measured
around the loop by the script itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import emulator

SCRIPTS = Path(__file__).parents[1] / "scripts"
STEPS = 4


def test_streams_events_and_nvtx_in_a_ddp_loop_on_2x2(tmp_path: Path) -> None:
    result = emulator.run(entry_point="cuda_streams.py", source_dir=SCRIPTS, output_path=tmp_path,
                          job_name="cuda-streams", instance_count=2, instance_type="ml.p4d.24xlarge",
                          gpus_per_host=2, distribution={"torch_distributed": {"enabled": True}},
                          echo=False, stop_grace=2, profile="ci")
    assert result.status == "Completed", f"{result.failure_reason}\n{result.log_tail('algo-1', 40)}"
    reports = {int(r["rank"]): r for r in (json.loads(v) for k, v in result.model_files().items()
                                           if k.startswith("streams-rank-"))}
    assert sorted(reports) == [0, 1, 2, 3]
    for rank, r in reports.items():
        assert r["backend"] == "gloo"
        assert len(r["losses"]) == STEPS and all(loss >= 0 for loss in r["losses"])
        assert len(r["step_ms"]) == STEPS and all(ms >= 0 for ms in r["step_ms"]), r["step_ms"]
        since = r["since_start_ms"]
        assert since == sorted(since) and since[0] >= r["step_ms"][0], r
        assert since[-1] <= r["outer_ms"], r
        assert r["stream_inside"] == [True] * STEPS
        assert r["side"] == {"device": f"cuda:{rank % 2}", "priority": -1, "query": True, "is_default": False}
        assert r["main_is_default"] is True and r["event_query"] is True
        assert r["timing_disabled_error"] == "Both events must be created with argument 'enable_timing=True'."
        assert r["profiled"] == ["profiled mark", "profiled push", "profiled range"]
    assert len({r["losses"][0] for r in reports.values()}) == 4  # each rank's own batches
    assert all(r["params"] == reports[0]["params"] for r in reports.values())  # replicas in step
