"""``python -m emulator doctor``'s report (emulator/backends/doctor.py) without probing: the disk check, the
exit code, the docker row without an engine, and the text a person reads. The probes themselves,
against real refusals, are tested in tests/jobs/test_backend_choice.py."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

from emulator.backends import doctor
from emulator.backends.doctor import Check


def test_disk_reads_the_nearest_existing_folder_and_compares_with_the_need(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free  # the oracle: the OS's own number for that filesystem
    enough = doctor.check_disk(tmp_path / "not" / "yet", need=1)
    assert enough.ok and f"{free / 1e9:.1f} GB free" in enough.detail and not enough.fix
    short = doctor.check_disk(tmp_path, need=free * 2)
    assert not short.ok and "XDG_CACHE_HOME" in short.fix


def test_exit_code_is_0_when_one_backend_can_run() -> None:
    other = [Check("mpi", True, ""), Check("disk", True, ""), Check("auto", True, "")]
    assert doctor.exit_code([Check("process", False, "x"), Check("docker", True, "y"), *other]) == 0
    assert doctor.exit_code([Check("process", False, "x"), Check("docker", False, "y"), *other]) == 1


def test_no_engine_is_the_docker_rows_finding_with_a_fix() -> None:
    row = doctor.check_docker(False, "the docker engine at unix:///nowhere did not answer")
    assert not row.ok and "unix:///nowhere" in row.detail and "DOCKER_HOST" in row.fix


def test_the_report_is_aligned_uncoloured_off_a_terminal_and_lists_the_fixes() -> None:
    report = [Check("process", True, "works " * 30), Check("docker", False, "no engine", "start one")]
    text = doctor.render(report, io.StringIO(), width=60)
    lines = text.splitlines()
    assert "\033[" not in text and all(len(line) <= 60 for line in lines)
    assert lines[0].startswith("process  ok  works") and lines[1].startswith(" " * 13 + "works")
    assert lines[-3:] == ["docker   no  no engine", "fix:", "  docker: start one"]
