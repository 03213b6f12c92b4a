"""``emulator.diagnostics.topology.analyze`` on hand-written rank records."""

from __future__ import annotations

import json
from pathlib import Path

from emulator.diagnostics.topology import Diagnostic, analyze


def _record(folder: Path, host: str, pid: int, rank: int, world: int, samplers=()) -> None:
    folder.mkdir(exist_ok=True)
    data = {
        "host": host,
        "pid": pid,
        "process_groups": [{"rank": rank, "world_size": world, "backend_actual": "gloo"}],
        "samplers": list(samplers),
    }
    (folder / f"{host}-{pid}.json").write_text(json.dumps(data))


def test_clean_job_has_no_findings(tmp_path: Path) -> None:
    for rank in range(4):
        sampler = {"num_replicas": 4, "rank": rank, "group_world_size": 4, "group_rank": rank}
        _record(tmp_path, f"algo-{rank // 2 + 1}", 100 + rank, rank, 4, [sampler])
    assert analyze(tmp_path) == []
    assert analyze(tmp_path / "missing") == []


def test_duplicate_rank(tmp_path: Path) -> None:
    _record(tmp_path, "algo-1", 10, 0, 2)
    _record(tmp_path, "algo-2", 11, 0, 2)
    (finding,) = analyze(tmp_path)
    assert finding.kind == "duplicate-rank"
    assert finding.hosts == ("algo-1", "algo-2")
    assert "rank 0 is claimed by 2 processes" in finding.message


def test_sampler_mismatch_and_world_size_mismatch(tmp_path: Path) -> None:
    _record(tmp_path, "algo-1", 10, 0, 4, [{"num_replicas": 2, "rank": 0}])
    _record(tmp_path, "algo-2", 11, 1, 2)
    findings = analyze(tmp_path)
    kinds = sorted(f.kind for f in findings)
    assert kinds == ["sampler-mismatch", "world-size-mismatch"]
    sampler = next(f for f in findings if f.kind == "sampler-mismatch")
    assert sampler == Diagnostic(sampler.kind, sampler.message, ("algo-1",))
    assert "num_replicas=2" in sampler.message and "world_size=4" in sampler.message


def test_unreadable_record(tmp_path: Path) -> None:
    (tmp_path / "algo-1-5.json").write_text("{not json")
    (finding,) = analyze(tmp_path)
    assert finding.kind == "unreadable-record" and finding.hosts == ("algo-1",)
