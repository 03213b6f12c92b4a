"""Collective records on real torchrun ranks (gloo, nccl run on gloo, the smddp stand-in), and the
comparison that names the first divergence. Expected ops, shapes and lines come from the scripts."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

from emulator.diagnostics import collectives

from .test_stacks import _line, _start, _stop, _wait_for

MISMATCH = textwrap.dedent("""\
    import os
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.ones(8)
    dist.all_reduce(t)  # FIRST
    os.write(1, b"WARM\\n")
    if rank == 0:
        dist.broadcast(t, src=0)  # BROADCAST
    else:
        dist.all_reduce(t)  # ALLREDUCE
""")


def _records(diag: Path) -> list[collectives.RankRecord]:
    records, problems = collectives.load(diag)
    assert problems == []
    return records


def test_first_divergent_op_is_named_even_after_sigkill(tmp_path: Path) -> None:
    proc, diag = _start(tmp_path, MISMATCH, 2)
    try:
        _wait_for(proc, 2)
        time.sleep(0.5)
    finally:
        _stop(proc)  # SIGKILL: the rings must still be readable
    records = _records(diag)
    assert [(r.rank, [c.op for c in r.calls]) for r in records] == [(0, ["all_reduce", "broadcast"]),
                                                                     (1, ["all_reduce", "all_reduce"])]
    assert records[0].calls[0].state == "returned" and records[0].calls[1].state == "issued"
    (finding,) = collectives.compare(records)
    host = records[0].host
    assert finding.kind == "collective-mismatch"
    assert finding.message == (
        f"rank 0 ({host}) issued broadcast (train.py:{_line(MISMATCH, '# BROADCAST')} in <module>) as collective #2 "
        f"of the default group while rank 1 issued all_reduce (train.py:{_line(MISMATCH, '# ALLREDUCE')} in <module>)")


SHAPES = textwrap.dedent("""\
    import os
    import torch
    import torch.distributed as dist
    from datetime import timedelta

    dist.init_process_group("nccl", timeout=timedelta(seconds=20))  # runs on gloo (GPUs are emulated)
    rank = dist.get_rank()
    dist.barrier()
    os.write(1, b"WARM\\n")
    dist.all_reduce(torch.ones(8 if rank == 0 else 4))
""")


def test_shape_mismatch_on_the_nccl_to_gloo_path(tmp_path: Path) -> None:
    proc, diag = _start(tmp_path, SHAPES, 2, EMULATOR_GPU_COUNT="2")
    try:
        _wait_for(proc, 2)
        for _ in range(100):  # gloo refuses or hangs; either way both ranks issued it
            if all(len(r.calls) == 2 for r in _records(diag)) and len(_records(diag)) == 2:
                break
            time.sleep(0.1)
    finally:
        _stop(proc)
    records = _records(diag)
    assert {json.loads(p.read_text())["backend"] for p in diag.glob("coll-*.json")} == {"gloo"}
    (finding,) = collectives.compare(records)
    assert finding.kind == "collective-shape-mismatch"
    assert finding.message == ("all_reduce #2 of the default group: tensor=float32[8] op=SUM on rank 0, "
                               "tensor=float32[4] op=SUM on rank 1")


SMDDP = textwrap.dedent("""\
    import os
    import torch
    import torch.distributed as dist
    import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401  registers "smddp"

    dist.init_process_group("smddp")
    t = torch.ones(2)
    dist.all_reduce(t)
    objects = [{"epoch": 1}] if dist.get_rank() == 0 else [None]
    dist.broadcast_object_list(objects, src=0)  # calls broadcast twice inside: recorded once
    dist.barrier()
    os.write(1, f"DONE {objects[0]}\\n".encode())
""")


def test_smddp_stand_in_records_each_outermost_call(tmp_path: Path) -> None:
    proc, diag = _start(tmp_path, SMDDP, 2, EMULATOR_GPU_COUNT="2")
    try:
        _wait_for(proc, 2, b"DONE")
        assert proc.wait(timeout=60) == 0
    finally:
        _stop(proc)
    records = _records(diag)
    assert [[c.op for c in r.calls] for r in records] == [["all_reduce", "broadcast_object_list", "barrier"]] * 2
    assert all(c.state == "returned" for r in records for c in r.calls)
    assert {json.loads(p.read_text())["backend"] for p in diag.glob("coll-*.json")} == {"smddp"}
    assert collectives.compare(records) == []


def test_recording_can_be_turned_off(tmp_path: Path) -> None:
    proc, diag = _start(tmp_path, SMDDP, 2, EMULATOR_GPU_COUNT="2", EMULATOR_COLLECTIVES="0")
    try:
        _wait_for(proc, 2, b"DONE")
        assert proc.wait(timeout=60) == 0
    finally:
        _stop(proc)
    assert list(diag.glob("coll-*")) == []


def test_missing_rank_is_named(tmp_path: Path) -> None:
    """Hand-made records: rank 1 never issued #3."""
    def rec(rank: int, ops: list[str]) -> collectives.RankRecord:
        calls = [collectives.Call(i + 1, "default", op, "returned", 1, 0.0, 0.0, "tensor=float32[1]", "t.py:1 in f")
                 for i, op in enumerate(ops)]
        return collectives.RankRecord(f"algo-{rank + 1}", 10 + rank, rank, 3, 0.0, {"default": [0, 1, 2]}, calls)

    (finding,) = collectives.compare([rec(0, ["a", "b", "c"]), rec(1, ["a", "b"]), rec(2, ["a", "b", "c"])])
    assert finding.kind == "collective-missing"
    assert finding.message.startswith("rank 1 (algo-2) never reached collective #3 of the default group (c, issued "
                                      "by ranks 0, 2 at t.py:1 in f); rank 1's last was #2 b")
