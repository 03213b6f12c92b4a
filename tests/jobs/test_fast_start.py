"""Fast rank start (``fast_start=True``: emulator/inhost/site/_sm_emulator_faststart.py) forks a host's
ranks only where that cannot change their ``str`` hash seeds.

CPython draws a random hash secret at each interpreter start unless ``PYTHONHASHSEED`` fixes it
(Python docs, "PYTHONHASHSEED"; ``sys.flags.hash_randomization``), and no process can change its own
after start. So ranks started normally each hash strings (and iterate sets of them) their own way, as
on SageMaker, and ranks forked from one interpreter would all share its way. Oracles: the ranks' own
values, and a fresh interpreter of the host started with the rank's ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import emulator
from emulator.job.result import JobResult

SCRIPTS = Path(__file__).parents[1] / "scripts"


def _job(tmp_path: Path, name: str, environment: dict[str, str]) -> JobResult:
    return emulator.run(entry_point="hash_seed.py", source_dir=SCRIPTS, instance_count=1,
                        instance_type="ml.p4d.24xlarge", gpus_per_host=2,
                        distribution={"torch_distributed": {"enabled": True}}, environment=environment,
                        output_path=tmp_path / name, job_name=name, echo=False, stop_grace=2, fast_start=True)


def _records(result: JobResult) -> dict[int, dict[str, Any]]:
    return {json.loads(v)["rank"]: json.loads(v) for k, v in result.model_files().items() if k.startswith("hash-")}


def test_without_a_fixed_hash_seed_every_rank_starts_normally(tmp_path: Path) -> None:
    result = _job(tmp_path, "fast-unseeded", {})
    assert result.status == "Completed", result.failure_reason
    records = _records(result)
    assert sorted(records) == [0, 1]
    assert all(r["torchrun_parent"] and not r["forked"] for r in records.values()), records
    assert records[0]["hash"] != records[1]["hash"], records  # a secret of its own each, as on SageMaker
    assert "PYTHONHASHSEED is not a fixed number" in result.log("algo-1")
    assert any("fast rank start" in d for d in result.description["Emulator"]["Deviations"])


def test_with_a_fixed_hash_seed_ranks_are_forked_with_the_seed_a_fresh_start_has(tmp_path: Path) -> None:
    result = _job(tmp_path, "fast-seeded", {"PYTHONHASHSEED": "7"})
    assert result.status == "Completed", result.failure_reason
    records = _records(result)
    assert sorted(records) == [0, 1]
    assert all(r["forked"] for r in records.values()), records
    assert all(r["hash"] == r["fresh_hash"] for r in records.values()), records
    assert records[0]["order"] == records[1]["order"]
    assert "PYTHONHASHSEED is not a fixed number" not in result.log("algo-1")
