"""The process backend as an ordinary user (per-job user namespaces), and output ownership.

CI runs this file as a non-root user through ``.ci/unprivileged``. As root, the process-backend
test is skipped (as root nothing maps user ids: every file is root's whatever the emulator does,
so there is nothing to check), and the docker test hands the files to another user id, which is
what it does for a non-root caller.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import emulator
from emulator.backends.docker.backend import DockerBackend
from emulator.backends.materialise import host_root
from emulator.job import request as rq
from emulator.supervisor import run as run_job

SCRIPTS = Path(__file__).parents[1] / "scripts"
#: Who gets the containers' files when the test runs as root: any id that is not root's.
OTHER_OWNER = (4242, 4343)


@pytest.mark.skipif(os.geteuid() == 0, reason="as root every file is root's by construction (no user namespace "
                    "maps ids); CI runs this test as a non-root user through .ci/unprivileged")
def test_two_host_job_runs_and_leaves_files_owned_by_the_caller(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "rank_report.py").write_text((SCRIPTS / "rank_report.py").read_text())
    out = src / "out"  # output inside the source dir must not be copied into /opt/ml/code
    result = emulator.run(entry_point="rank_report.py", source_dir=src, instance_count=2,
                          instance_type="ml.g5.12xlarge", gpus_per_host=1,
                          distribution={"torch_distributed": {"enabled": True}},
                          output_path=out, job_name="unprivileged", echo=False, stop_grace=2, keep_hosts=True)
    assert result.status == "Completed", result.failure_reason
    reports = [json.loads(v) for k, v in result.model_files().items() if k.startswith("rank-")]
    assert sorted(r["host"] for r in reports) == ["algo-1", "algo-2"]
    assert all(r["sum"] == 3.0 for r in reports)
    written = list(result.job_dir.rglob("*"))
    # the hosts' trees (kept) hold what the ranks wrote as "root" inside their user namespace
    assert any(p.name.startswith("rank-") for p in written), written
    uid = os.getuid()
    assert [p for p in written if p.lstat().st_uid != uid] == []


def test_docker_job_hands_root_written_files_back(tmp_path: Path, docker_ready: None) -> None:
    """Containers run as root; afterwards everything they wrote belongs to the backend's owner
    (the caller; as root, :data:`OTHER_OWNER`, since handing root's files to root proves nothing)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(
        "import os\nos.makedirs('/opt/ml/output/data/sub', exist_ok=True)\n"
        "open('/opt/ml/output/data/sub/o.txt', 'w').write('x')\nopen('/opt/ml/model/m.txt', 'w').write('m')\n")
    owner = (os.getuid(), os.getgid()) if os.geteuid() else OTHER_OWNER
    request = rq.create(entry_point="train.py", source_dir=src, instance_count=2,
                        output_path=tmp_path / "out", job_name="ownership")
    result = run_job(request, backend=DockerBackend(owner=owner), echo=False, stop_grace=2, keep_hosts=True)
    assert result.status == "Completed", result.failure_reason
    assert set(result.model_files()) == {"m.txt"}
    for host in ("algo-1", "algo-2"):
        tree = host_root(result.job_dir, host)
        written = [tree, *tree.rglob("*")]
        assert tree / "output" / "data" / "sub" / "o.txt" in written
        assert [p for p in written if (p.lstat().st_uid, p.lstat().st_gid) != owner] == []
    if os.geteuid():  # and what the emulator itself wrote (job.json, logs, archives) is the caller's
        assert [p for p in result.job_dir.rglob("*") if p.lstat().st_uid != os.getuid()] == []
