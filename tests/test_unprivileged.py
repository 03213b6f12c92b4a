"""The process backend as an ordinary user (per-job user namespaces), and output ownership.

Run by ``.ci/unprivileged`` as a non-root user; as root these tests still run (root path).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import emulator

SCRIPTS = Path(__file__).parent / "scripts"


def test_two_host_job_runs_and_leaves_files_owned_by_the_caller(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "rank_report.py").write_text((SCRIPTS / "rank_report.py").read_text())
    out = src / "out"  # output inside the source dir must not be copied into /opt/ml/code
    result = emulator.run(entry_point="rank_report.py", source_dir=src, instance_count=2,
                          instance_type="ml.g5.12xlarge", gpus_per_host=1,
                          distribution={"torch_distributed": {"enabled": True}},
                          output_path=out, job_name="unprivileged", echo=False, stop_grace=2)
    assert result.status == "Completed", result.failure_reason
    reports = [json.loads(v) for k, v in result.model_files().items() if k.startswith("rank-")]
    assert sorted(r["host"] for r in reports) == ["algo-1", "algo-2"]
    assert all(r["sum"] == 3.0 for r in reports)
    uid = os.getuid()
    for path in result.job_dir.rglob("*"):
        assert path.lstat().st_uid == uid, path


def test_docker_job_hands_root_written_files_back(tmp_path: Path, docker_ready: None) -> None:
    """Containers run as root; every file under the job folder is the caller's afterwards."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(
        "import os\nos.makedirs('/opt/ml/output/data/sub', exist_ok=True)\n"
        "open('/opt/ml/output/data/sub/o.txt', 'w').write('x')\nopen('/opt/ml/model/m.txt', 'w').write('m')\n")
    result = emulator.run(backend="docker", entry_point="train.py", source_dir=src, instance_count=2,
                          output_path=tmp_path / "out", job_name="ownership", echo=False, stop_grace=2,
                          keep_hosts=True)
    assert result.status == "Completed", result.failure_reason
    assert set(result.model_files()) == {"m.txt"}
    uid = os.getuid()
    owned = [p for p in result.job_dir.rglob("*") if p.lstat().st_uid != uid]
    assert owned == []
