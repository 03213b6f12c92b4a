"""Progress lines of a job environment's pip phase (issue 57: no silent phase over 10 s).

Oracle for the log's lines: pip's own code (the installed pip's ``format_size`` and the format
strings of ``operations/prepare.py`` "Collecting %s", ``network/download.py`` "Downloading %s"
with ``(<size>)``, ``req/__init__.py`` "Installing collected packages: %s", ``commands/install.py``
"Successfully installed ...").
"""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path

from pip._internal.utils.misc import format_size

from emulator.progress import PREFIX, PipProgress, watch_pip_log


def _pip_lines() -> list[str]:
    return ["Collecting torch==2.13.0",
            f"  Downloading https://example.invalid/torch-2.13.0-cp311-none.whl ({format_size(187_400_000)})",
            "Collecting numpy",
            f"  Downloading numpy-2.3.0-cp311-cp311-manylinux_2_28_x86_64.whl ({format_size(16_600_000)})",
            "Collecting six",
            f"  Downloading six-1.17.0-py2.py3-none-any.whl ({format_size(11_050)})",
            "Installing collected packages: six, numpy, torch"]


def test_pip_lines_count_packages_megabytes_and_installs() -> None:
    progress = PipProgress()
    for line in _pip_lines():
        progress.feed(line)
    assert (progress.collected, progress.installing) == (3, 3)
    assert abs(progress.downloaded_mb - (187.4 + 16.6 + 0.011)) < 0.01
    assert progress.describe() == "3 package(s) collected, 204 MB downloaded, installing 3"
    progress.feed("Successfully installed numpy-2.3.0 six-1.17.0 torch-2.13.0")
    assert progress.describe() == "3 package(s) collected, 204 MB downloaded, 3 installed"


def test_a_long_phase_says_how_far_pip_is(tmp_path: Path) -> None:
    log = tmp_path / "jobenv.log"
    log.write_text("an earlier job's pip output\nCollecting old\n")
    out = io.StringIO()
    with watch_pip_log(log, "making the job's environment", out, interval=0.05):
        with log.open("a") as f:
            for line in _pip_lines():
                f.write(line + "\n")
                f.flush()
                time.sleep(0.02)
        time.sleep(0.2)
    lines = out.getvalue().splitlines()
    assert lines and all(line.startswith(f"{PREFIX}making the job's environment (") for line in lines)
    assert lines[0].endswith(f"; pip's output: {log}")  # where the detail is, once
    assert lines[-1].endswith(": 3 package(s) collected, 204 MB downloaded, installing 3")
    assert len(lines) > 1 and not any(str(log) in line for line in lines[1:])


def test_a_cached_environment_says_nothing(tmp_path: Path) -> None:
    out = io.StringIO()
    with watch_pip_log(tmp_path / "jobenv.log", "making the job's environment", out, interval=5.0):
        pass
    assert out.getvalue() == ""
    assert not [t for t in threading.enumerate() if t.name == "pip-progress"]
